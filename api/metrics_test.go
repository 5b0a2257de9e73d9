package api_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/api"
	"github.com/checkpointd/checkpointd/errlog"
	"github.com/checkpointd/checkpointd/lease"
	"github.com/checkpointd/checkpointd/metrics"
	"github.com/checkpointd/checkpointd/reconcile"
	"github.com/checkpointd/checkpointd/reconcile/forgetest"
	"github.com/checkpointd/checkpointd/store/storetest"
	"github.com/checkpointd/checkpointd/webhook"
)

// The heads of the fixture pushes: 07 creates feature/alpha of
// operator/demo at headOne, 09 fast-forwards it to headTwo.
const (
	headOne     = "2d180d0b5a6ae702d5efc399f36073d5952b6c59"
	headTwo     = "beecf70ccd0f120ef28564c5882c3c35b9ce1408"
	scriptToken = "ghp_abcdefghijklmnopqrstuvwxyz0123456789" // a GitHub token pattern
)

// script is what the scripted run leaves for the assertions.
type script struct {
	h         *harness
	sensitive []string // every repo, id, secret and token the script used
}

// runScript drives the real API, with metrics wired as serve wires them,
// through the life the metrics describe. Each step's effect on the
// metrics is in its comment; TestMetricsAfterScript asserts the sums.
func runScript(t *testing.T, b storetest.Backend) *script {
	t.Helper()
	clk := checkpointd.NewManualClock(time.Now())
	s := storetest.Open(t, b, clk)
	m := metrics.New()
	s.SetObserver(m)
	errs := errlog.New(s, nil, m)
	forge := forgetest.New(t)
	push1, push2 := loadDelivery(t, "07-push-new-branch.json"), loadDelivery(t, "09-push-fast-forward.json")
	mgr := lease.NewManager(s, nil)
	rec := &reconcile.Reconciler{Store: s, Forge: reconcile.Gitea(forge.URL, "", 0), ForgeURL: forge.URL,
		CallTimeout: 5 * time.Second, Attempts: 1, Clock: clk, Metrics: m, Errors: errs}
	h := &harness{t: t, store: s}
	h.handler = api.New(api.Deps{Store: api.StoresOf(s), Leases: mgr, Workflow: checkpointd.DefaultWorkflow(), DigestKey: testDigestKey,
		Webhook: &webhook.Handler{Verifier: &webhook.Verifier{Secrets: [][]byte{[]byte(push1.Secret)}}, Store: s,
			Log: slog.New(slog.DiscardHandler), Metrics: m, Errors: errs},
		Reconciler: rec, Metrics: m, MetricsHandler: m.Handler(), Errors: errs, DrainHeaderTTL: -1})
	h.operator = h.token(checkpointd.RoleOperator, nil)
	op := h.operator
	sc := &script{h: h, sensitive: []string{"operator/demo", "acme/broken", "feature/alpha", scriptToken, op,
		push1.Secret, push1.Headers["X-Gitea-Delivery"], push2.Headers["X-Gitea-Delivery"], headOne, headTwo}}
	deliver := func(d delivery, body string) response {
		req := httptest.NewRequest("POST", "/webhooks/gitea", strings.NewReader(body))
		for k, v := range d.Headers {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		h.handler.ServeHTTP(rec, req)
		return response{status: rec.Code, header: rec.Header(), raw: rec.Body.Bytes()}
	}

	// Session A on operator/demo feature/alpha: no metric but HTTP.
	a := h.do("POST", "/v1/sessions", op, map[string]any{"repo": "operator/demo", "role": "author", "branch": "feature/alpha"}).expect(t, 201, "")
	id, run1 := a.str("session", "id"), a.str("run", "id")
	// The branch is created at headOne: webhook push/applied. A has no
	// checkpoint yet, so it stays unverified: no transition.
	deliver(push1, push1.Body).expect(t, 200, "")
	// A lease through the manager: lease acquired.
	l := h.do("POST", "/v1/leases", op, map[string]any{"resource": map[string]any{"kind": "branch", "repo": "operator/demo",
		"branch": "feature/alpha"}, "session_id": id, "run_id": run1, "ttl_seconds": 60}).expect(t, 201, "")
	// A checkpoint with a secret at the live head: writes ok, one
	// redaction, one write latency, validity checkpoint → valid.
	doc := func(run string, tok int64, action string) map[string]any {
		return checkpointDoc(run, tok, func(d map[string]any) {
			d["target"] = map[string]any{"repo": "operator/demo"}
			d["workspace"] = map[string]any{"branch": "feature/alpha", "head": headOne}
			d["next_action"] = map[string]any{"actor": "author", "action": action}
		})
	}
	first := doc(run1, 1, "push with "+scriptToken)
	cp := h.doKey("POST", "/v1/sessions/"+id+"/checkpoints", op, "k1", first).expect(t, 201, "")
	if n := cp.num("checkpoint", "redactions"); n != 1 {
		t.Fatalf("redactions %d, want 1: %s", n, cp.raw)
	}
	// The same request again: replayed, writes ok (not a new write).
	if r := h.doKey("POST", "/v1/sessions/"+id+"/checkpoints", op, "k1", first).expect(t, 200, ""); r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("not a replay: %v", r.header)
	}
	// The key with another document: conflict, writes
	// idempotency_conflict, a durable checkpoint_write error.
	h.doKey("POST", "/v1/sessions/"+id+"/checkpoints", op, "k1", doc(run1, 1, "something else")).expect(t, 422, "idempotency_conflict")
	// A takeover moves the lease (lease moved); the old run's write is
	// refused: writes run_superseded (no durable error: a 409 is no fault).
	h.do("POST", "/v1/sessions/"+id+"/runs", op, map[string]any{"takeover": true, "reason": "script"}).expect(t, 201, "")
	h.do("POST", "/v1/sessions/"+id+"/checkpoints", op, doc(run1, 1, "late")).expect(t, 409, "run_superseded")
	// A forged delivery (the body changed, the signature not): webhook
	// push/bad_signature and a durable webhook error.
	deliver(push2, push2.Body+" ").expect(t, 401, "")
	// The real one moves the branch to headTwo: push/applied, validity
	// webhook → stale.
	deliver(push2, push2.Body).expect(t, 200, "")
	// Reads: get ok, get not_found, list ok, resume ok.
	h.do("GET", "/v1/sessions/"+id+"/checkpoints/latest", op, nil).expect(t, 200, "")
	h.do("GET", "/v1/sessions/ses_nosuchsession/checkpoints/1", op, nil).expect(t, 404, "not_found")
	h.do("GET", "/v1/sessions/"+id+"/checkpoints", op, nil).expect(t, 200, "")
	if r := h.do("GET", "/v1/sessions/"+id+"/resume", op, nil).expect(t, 200, ""); r.str("validity") != "stale" {
		t.Fatalf("resume after the push: %s", r.raw)
	}
	// The lease's time runs out; the manager's worker step expires it:
	// lease expired (the checkpoint names no lease: no transition).
	clk.Advance(61 * time.Second)
	if n, err := mgr.ExpireOnce(t.Context()); n != 1 || err != nil {
		t.Fatalf("ExpireOnce: %d %v, want 1 lease", n, err)
	}
	if r := h.do("GET", "/v1/leases?session_id="+id, op, nil).expect(t, 200, ""); !strings.Contains(string(r.raw), `"expired"`) {
		t.Fatalf("lease %s not expired: %s", l.str("lease", "id"), r.raw)
	}
	// Session B on a repository the forge fails for, with a checkpoint (no
	// live head: stays unverified, no transition): writes ok, latency.
	bs := h.do("POST", "/v1/sessions", op, map[string]any{"repo": "acme/broken", "role": "author", "branch": "b"}).expect(t, 201, "")
	h.do("POST", "/v1/sessions/"+bs.str("session", "id")+"/checkpoints", op, checkpointDoc(bs.str("run", "id"), 1, func(d map[string]any) {
		d["target"] = map[string]any{"repo": "acme/broken"}
		d["workspace"] = map[string]any{"branch": "b", "head": headOne}
	})).expect(t, 201, "")
	// A pass: the forge says feature/alpha is back at headOne (forge call
	// ok; validity reconcile → valid) and answers 503 for acme/broken
	// (forge call server_error; B stays unverified; a durable reconcile
	// error): pass forge_errors.
	forge.AddRepo(1, "operator/demo")
	forge.SetBranch("operator/demo", "feature/alpha", headOne)
	forge.Intercept(forgetest.Status("acme/broken", http.StatusServiceUnavailable, ""))
	h.do("POST", "/v1/reconcile", op, nil).expect(t, 200, "")
	// A drain neither session is ready for: state draining, decision
	// blocked with 2 blocking sessions.
	h.do("POST", "/v1/drain", op, map[string]any{"reason": "deploy"}).expect(t, 201, "")
	h.do("POST", "/v1/drain/complete", op, nil).expect(t, 409, "drain_blocked")
	// A restart resets what was verified: validity restart → unverified (A).
	if n, err := s.ResetValidity(t.Context(), "restart"); n != 1 || err != nil {
		t.Fatalf("ResetValidity: %d %v, want 1", n, err)
	}
	sc.sensitive = append(sc.sensitive, id, run1, bs.str("session", "id"), bs.str("run", "id"), l.str("lease", "id"))
	return sc
}

// scrape reads GET /metrics as Prometheus would and parses it.
func scrape(t *testing.T, h *harness) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	r := h.do("GET", "/metrics", "", nil)
	if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics: %d %s", r.status, r.header.Get("Content-Type"))
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(r.raw)))
	if err != nil {
		t.Fatalf("parse the exposition: %v", err)
	}
	return fams, string(r.raw)
}

// value is the value of one series ("k=v,k=v" labels): a counter's or a
// gauge's value, a histogram's sample count; 0 when absent.
func value(fams map[string]*dto.MetricFamily, name, labels string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
	want := map[string]string{}
	for _, kv := range strings.Split(labels, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			want[k] = v
		}
	}
next:
	for _, m := range f.Metric {
		if len(m.Label) != len(want) {
			continue
		}
		for _, lp := range m.Label {
			if want[lp.GetName()] != lp.GetValue() {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return 0
}

// total sums a counter family's series.
func total(f *dto.MetricFamily) float64 {
	sum := 0.0
	if f != nil {
		for _, m := range f.Metric {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// TestMetricsAfterScript scrapes /metrics after the script and checks
// every metric the script moves, with its value.
func TestMetricsAfterScript(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		sc := runScript(t, b)
		fams, _ := scrape(t, sc.h)
		const p = "checkpointd_"
		for _, c := range []struct {
			name, labels string
			want         float64
		}{
			{p + "checkpoint_writes_total", "outcome=ok", 3}, // A, its replay, B
			{p + "checkpoint_writes_total", "outcome=idempotency_conflict", 1},
			{p + "checkpoint_writes_total", "outcome=run_superseded", 1},
			{p + "checkpoint_write_duration_seconds", "", 2}, // committed writes only
			{p + "redactions_total", "", 1},
			{p + "idempotency_total", "result=replayed", 1},
			{p + "idempotency_total", "result=conflict", 1},
			{p + "checkpoint_reads_total", "kind=get,outcome=ok", 1},
			{p + "checkpoint_reads_total", "kind=get,outcome=not_found", 1},
			{p + "checkpoint_reads_total", "kind=list,outcome=ok", 1},
			{p + "checkpoint_reads_total", "kind=resume,outcome=ok", 1},
			{p + "webhook_deliveries_total", "event=push,outcome=applied", 2},
			{p + "webhook_deliveries_total", "event=push,outcome=bad_signature", 1},
			{p + "webhook_answer_duration_seconds", "", 2}, // applied deliveries only
			{p + "settle_duration_seconds", "", 3},         // the two pushes and the ref reconcile answered
			{p + "validity_transitions_total", "cause=checkpoint,to=valid", 1},
			{p + "validity_transitions_total", "cause=webhook,to=stale", 1},
			{p + "validity_transitions_total", "cause=reconcile,to=valid", 1},
			{p + "validity_transitions_total", "cause=restart,to=unverified", 1},
			{p + "lease_events_total", "event=acquired", 1},
			{p + "lease_events_total", "event=moved", 1},
			{p + "lease_events_total", "event=expired", 1},
			{p + "lease_events_total", "event=released", 0},
			{p + "reconcile_passes_total", "outcome=forge_errors", 1},
			{p + "reconcile_pass_duration_seconds", "", 1},
			{p + "reconcile_forge_calls_total", "outcome=ok", 1},
			{p + "reconcile_forge_calls_total", "outcome=server_error", 1},
			{p + "drain_state", "state=draining", 1},
			{p + "drain_state", "state=none", 0},
			{p + "drain_state", "state=completed", 0},
			{p + "drain_blocking_sessions", "", 2},
			{p + "drain_decisions_total", "outcome=blocked", 1},
			{p + "errors_recorded_total", "source=checkpoint_write", 1},
			{p + "errors_recorded_total", "source=webhook", 1},
			{p + "errors_recorded_total", "source=reconcile", 1},
			{p + "store_errors_total", "op=write", 0},
			{p + "store_errors_total", "op=read", 0},
			{p + "http_requests_total", "method=POST,route=/v1/sessions/{id}/checkpoints,status=2xx", 3},
			{p + "http_requests_total", "method=POST,route=/v1/sessions/{id}/checkpoints,status=4xx", 2},
			{p + "http_requests_total", "method=POST,route=/webhooks/gitea,status=2xx", 2},
			{p + "http_requests_total", "method=POST,route=/webhooks/gitea,status=4xx", 1},
			{p + "http_requests_total", "method=GET,route=/v1/sessions/{id}/checkpoints/{seq},status=4xx", 1},
			{p + "http_request_duration_seconds", "method=POST,route=/v1/sessions", 2},
		} {
			if got := value(fams, c.name, c.labels); got != c.want {
				t.Errorf("%s{%s} = %v, want %v", c.name, c.labels, got, c.want)
			}
		}
		// These families hold exactly the series above: nothing else moved.
		for name, want := range map[string]float64{p + "validity_transitions_total": 4, p + "lease_events_total": 3,
			p + "webhook_deliveries_total": 3, p + "checkpoint_writes_total": 5, p + "idempotency_total": 2,
			p + "reconcile_forge_calls_total": 2, p + "drain_decisions_total": 1, p + "store_errors_total": 0} {
			if got := total(fams[name]); got != want {
				t.Errorf("%s sums to %v, want %v", name, got, want)
			}
		}
		for _, name := range []string{"go_goroutines", "process_cpu_seconds_total"} {
			if fams[name] == nil {
				t.Errorf("%s missing: the Go and process collectors are not registered", name)
			}
		}
		for name := range fams {
			if !strings.HasPrefix(name, p) && !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") {
				t.Errorf("metric %s is not prefixed %s", name, p)
			}
		}
	})
}

// TestMetricLabelsCarryNoUserContent: after the script, no label value
// (and no other part of the exposition) contains a repo, a branch, a
// session, run or lease id, a delivery id, a head, a token or a secret
// that the script used.
func TestMetricLabelsCarryNoUserContent(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		sc := runScript(t, b)
		fams, text := scrape(t, sc.h)
		var values []string
		for _, f := range fams {
			for _, m := range f.Metric {
				for _, lp := range m.Label {
					values = append(values, lp.GetName()+"="+lp.GetValue())
				}
			}
		}
		if len(values) < 50 {
			t.Fatalf("only %d label values: the script moved too little to prove anything", len(values))
		}
		for _, secret := range sc.sensitive {
			if secret == "" {
				t.Fatal("an empty sensitive string")
			}
			for _, v := range values {
				if strings.Contains(strings.ToLower(v), strings.ToLower(secret)) {
					t.Errorf("label %q carries %q", v, secret)
				}
			}
			if strings.Contains(text, secret) {
				t.Errorf("the exposition carries %q", secret)
			}
		}
		// Label values are from the fixed sets: list them for the record.
		sort.Strings(values)
		t.Logf("%d label values, e.g. %s", len(values), strings.Join(values[:min(5, len(values))], " "))
	})
}
