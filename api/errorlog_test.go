package api_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/api"
	"github.com/checkpointd/checkpointd/errlog"
	"github.com/checkpointd/checkpointd/metrics"
	"github.com/checkpointd/checkpointd/reconcile"
	"github.com/checkpointd/checkpointd/reconcile/forgetest"
	"github.com/checkpointd/checkpointd/store/storetest"
	"github.com/checkpointd/checkpointd/webhook"
)

// errorsHarness is the harness with a webhook handler and a reconciler
// asking a fake forge, both recording durable errors through rec.
func errorsHarness(t *testing.T, b storetest.Backend, rec func(*harness) *errlog.Recorder) (*harness, *forgetest.Server, delivery) {
	t.Helper()
	h := newHarness(t, b)
	d := loadDelivery(t, "09-push-fast-forward.json")
	f := forgetest.New(t)
	errs := rec(h)
	r := &reconcile.Reconciler{Store: h.store, Forge: reconcile.Gitea(f.URL, "", 0), ForgeURL: f.URL, Attempts: 1,
		CallTimeout: 5 * time.Second, Errors: errs}
	h.handler = api.New(api.Deps{Store: api.StoresOf(h.store), Workflow: checkpointd.DefaultWorkflow(), DigestKey: testDigestKey,
		MaxDocumentBytes: 8 << 10, Reconciler: r, Errors: errs,
		Webhook: &webhook.Handler{Verifier: &webhook.Verifier{Secrets: [][]byte{[]byte(d.Secret)}}, Store: h.store,
			Log: slog.New(slog.DiscardHandler), Errors: errs}})
	return h, f, d
}

func defaultRecorder(h *harness) *errlog.Recorder { return errlog.New(h.store, nil, nil) }

// post sends a delivery with headers changed by edit (nil: as recorded).
func (h *harness) post(d delivery, body string, edit func(http.Header)) response {
	h.t.Helper()
	req := httptest.NewRequest("POST", "/webhooks/gitea", strings.NewReader(body))
	for k, v := range d.Headers {
		req.Header.Set(k, v)
	}
	if edit != nil {
		edit(req.Header)
	}
	rec := httptest.NewRecorder()
	h.handler.ServeHTTP(rec, req)
	return response{status: rec.Code, header: rec.Header(), raw: rec.Body.Bytes()}
}

type errorItem struct {
	source, code, session, repo, delivery, event, detail string
}

func (h *harness) errorsList(t *testing.T, token, query string) ([]errorItem, response) {
	t.Helper()
	r := h.do("GET", "/v1/errors"+query, token, nil).expect(t, 200, "")
	var out []errorItem
	for _, it := range r.get("items").([]any) {
		m := it.(map[string]any)
		s := func(k string) string { v, _ := m[k].(string); return v }
		out = append(out, errorItem{s("source"), s("code"), s("session_id"), s("repo"), s("delivery"), s("event"), s("detail")})
	}
	return out, r
}

// TestRefusedDeliveriesAreDurable: a delivery with a bad signature and
// one with none each leave a row with the delivery id, the event and the
// reason code, and nothing of the body or the signature. They name no
// repo, so a scoped reader does not see them.
func TestRefusedDeliveriesAreDurable(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h, _, d := errorsHarness(t, b, defaultRecorder)
		h.post(d, d.Body+" ", nil).expect(t, 401, "")
		h.post(d, d.Body, func(hd http.Header) {
			for _, k := range []string{"X-Gitea-Signature", "X-Gogs-Signature", "X-Hub-Signature", "X-Hub-Signature-256"} {
				hd.Del(k)
			}
			hd.Set("X-Gitea-Delivery", "second-delivery")
		}).expect(t, 401, "")

		got, r := h.errorsList(t, h.operator, "?source=webhook")
		want := []errorItem{
			{"webhook", "missing_signature", "", "", "second-delivery", "push", "webhook: missing signature"},
			{"webhook", "bad_signature", "", "", d.Headers["X-Gitea-Delivery"], "push", "webhook: bad signature"},
		}
		if !slices.Equal(got, want) {
			t.Fatalf("errors\n got %+v\nwant %+v", got, want)
		}
		for _, leak := range []string{"operator/demo", "commits", d.Headers["X-Gitea-Signature"], d.Secret} {
			if strings.Contains(string(r.raw), leak) {
				t.Errorf("GET /v1/errors carries %q: %s", leak, r.raw)
			}
		}
		if got, _ := h.errorsList(t, h.token(checkpointd.RoleReader, nil), ""); len(got) != 2 {
			t.Errorf("an unscoped reader sees %d errors, want 2", len(got))
		}
		if got, _ := h.errorsList(t, h.reader, ""); len(got) != 0 {
			t.Errorf("a scoped reader sees %+v, want none", got)
		}
	})
}

// TestReconcileErrorsPerRepo: a pass the forge fails for leaves one row
// per repository (however many refs it has there), with the refs in the
// detail; a scoped reader sees only its repos' rows.
func TestReconcileErrorsPerRepo(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h, f, _ := errorsHarness(t, b, defaultRecorder)
		f.AddRepo(1, "acme/ok")
		f.SetBranch("acme/ok", "main", liveHead)
		for _, s := range []struct{ repo, branch string }{{"acme/down", "a"}, {"acme/down", "b"}, {"acme/gone", "main"}, {"acme/ok", "main"}, {"other/down", "x"}} {
			h.do("POST", "/v1/sessions", h.operator, map[string]any{"repo": s.repo, "role": "author", "branch": s.branch}).expect(t, 201, "")
		}
		f.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
			if strings.Contains(r.URL.Path, "/acme/down/") || strings.Contains(r.URL.Path, "/other/down/") {
				return forgetest.Status("/", http.StatusServiceUnavailable, "")(w, r)
			}
			return false
		})
		h.do("POST", "/v1/reconcile", h.operator, nil).expect(t, 200, "")

		got, _ := h.errorsList(t, h.operator, "?source=reconcile")
		var repos []string
		for _, e := range got {
			repos = append(repos, e.repo+" "+e.code)
			if e.repo == "acme/down" && (!strings.Contains(e.detail, "branch:a") || !strings.Contains(e.detail, "branch:b")) {
				t.Errorf("acme/down detail %q does not name both refs", e.detail)
			}
		}
		slices.Sort(repos)
		want := []string{"acme/down forge_server_error", "acme/gone repo_not_visible", "other/down forge_server_error"}
		if !slices.Equal(repos, want) {
			t.Fatalf("reconcile errors %v, want %v", repos, want)
		}
		scoped, _ := h.errorsList(t, h.token(checkpointd.RoleReader, []string{"ACME/*"}), "")
		if len(scoped) != 2 || scoped[0].repo == "other/down" || scoped[1].repo == "other/down" {
			t.Errorf("an acme/* reader sees %+v, want the two acme rows", scoped)
		}
		if one, _ := h.errorsList(t, h.token(checkpointd.RoleReader, []string{"other/down"}), ""); len(one) != 1 || one[0].repo != "other/down" {
			t.Errorf("an other/down reader sees %+v", one)
		}
	})
}

// TestCheckpointWriteErrorsAreDurable: a refused checkpoint write leaves a
// row with its session and the session's repo, visible to a reader of
// that repo only; a write refused for who asked (403) leaves none.
func TestCheckpointWriteErrorsAreDurable(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h, _, _ := errorsHarness(t, b, defaultRecorder)
		id, run, tok := h.newSession()
		bad := checkpointDoc(run, tok, func(d map[string]any) { d["stage"] = "nowhere" })
		h.do("POST", "/v1/sessions/"+id+"/checkpoints", h.agent, bad).expect(t, 422, "invalid_checkpoint")
		h.do("POST", "/v1/sessions/"+id+"/checkpoints", h.token(checkpointd.RoleReader, nil), bad).expect(t, 403, "forbidden")
		// An agent of other repos: the document is refused before the scope
		// is checked, but it leaves no record on a session it cannot write.
		outsider := h.token(checkpointd.RoleAgent, []string{"other/*"})
		h.do("POST", "/v1/sessions/"+id+"/checkpoints", outsider, bad).expect(t, 422, "invalid_checkpoint")

		got, _ := h.errorsList(t, h.reader, "") // scoped to acme/widgets
		if len(got) != 1 || got[0].source != "checkpoint_write" || got[0].code != "invalid_checkpoint" ||
			got[0].session != id || got[0].repo != "acme/widgets" || strings.Count(got[0].detail, "/stage") != 1 {
			t.Fatalf("errors %+v (want one record, its detail naming /stage once)", got)
		}
		if other, _ := h.errorsList(t, h.token(checkpointd.RoleReader, []string{"other/*"}), ""); len(other) != 0 {
			t.Errorf("an other/* reader sees %+v", other)
		}
	})
}

// TestErrorsCapHolds: past the cap, each source keeps its newest rows;
// other sources keep theirs.
func TestErrorsCapHolds(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h, _, d := errorsHarness(t, b, defaultRecorder)
		h.store.SetErrorsKeep(5)
		if err := h.store.RecordErrors(t.Context(), []checkpointd.ErrorRecord{{Source: checkpointd.ErrorSourceReconcile, Code: "pass_failed"}}); err != nil {
			t.Fatal(err)
		}
		for i := range 12 {
			h.post(d, d.Body+" ", func(hd http.Header) { hd.Set("X-Gitea-Delivery", fmt.Sprintf("flood-%02d", i)) }).expect(t, 401, "")
		}
		got, _ := h.errorsList(t, h.operator, "?source=webhook&limit=500")
		var ids []string
		for _, e := range got {
			ids = append(ids, e.delivery)
		}
		if want := []string{"flood-11", "flood-10", "flood-09", "flood-08", "flood-07"}; !slices.Equal(ids, want) {
			t.Fatalf("kept %v, want the newest five %v", ids, want)
		}
		if rec, _ := h.errorsList(t, h.operator, "?source=reconcile"); len(rec) != 1 {
			t.Errorf("the reconcile row went with the webhook flood: %+v", rec)
		}
	})
}

// TestErrorsListParameters: pages by cursor, filters by source and since,
// and refuses an unknown source or a malformed time.
func TestErrorsListParameters(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h, _, d := errorsHarness(t, b, defaultRecorder)
		for i := range 3 {
			h.post(d, d.Body+" ", func(hd http.Header) { hd.Set("X-Gitea-Delivery", fmt.Sprintf("p-%d", i)) }).expect(t, 401, "")
		}
		first, r := h.errorsList(t, h.operator, "?limit=2")
		next := r.str("next_cursor")
		if len(first) != 2 || next == "" {
			t.Fatalf("first page %+v, cursor %q", first, next)
		}
		second, r := h.errorsList(t, h.operator, "?limit=2&cursor="+next)
		if len(second) != 1 || second[0].delivery != "p-0" || r.get("next_cursor") != nil {
			t.Fatalf("second page %+v %s", second, r.raw)
		}
		future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		if got, _ := h.errorsList(t, h.operator, "?since="+future); len(got) != 0 {
			t.Errorf("since the future: %+v", got)
		}
		past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
		if got, _ := h.errorsList(t, h.operator, "?source=webhook&since="+past); len(got) != 3 {
			t.Errorf("since an hour ago: %d rows, want 3", len(got))
		}
		h.do("GET", "/v1/errors?source=everything", h.operator, nil).expect(t, 422, "invalid_request")
		h.do("GET", "/v1/errors?since=yesterday", h.operator, nil).expect(t, 422, "invalid_request")
		h.do("GET", "/v1/errors", "", nil).expect(t, 401, "unauthorized")
	})
}

type failingErrors struct{}

func (failingErrors) RecordErrors(context.Context, []checkpointd.ErrorRecord) error {
	return fmt.Errorf("%w: disk on fire", checkpointd.ErrStoreUnavailable)
}

// TestRecordingFailureKeepsTheRefusal: when the errors cannot be
// recorded, a refused delivery is still 401 and a refused write still
// 422 — never a 500 — and the loss is counted.
func TestRecordingFailureKeepsTheRefusal(t *testing.T) {
	m := metrics.New()
	h, _, d := errorsHarness(t, storetest.SQLite, func(*harness) *errlog.Recorder { return errlog.New(failingErrors{}, nil, m) })
	h.post(d, d.Body+" ", nil).expect(t, 401, "")
	id, run, tok := h.newSession()
	h.do("POST", "/v1/sessions/"+id+"/checkpoints", h.agent, checkpointDoc(run, tok, func(d map[string]any) { d["stage"] = "x" })).
		expect(t, 422, "invalid_checkpoint")
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		byName[f.GetName()] = f
	}
	for _, src := range []string{"webhook", "checkpoint_write"} {
		if n := value(byName, "checkpointd_errors_dropped_total", "source="+src+",reason=store_failed"); n != 1 {
			t.Errorf("errors_dropped_total{source=%s,reason=store_failed} = %v, want 1", src, n)
		}
	}
}
