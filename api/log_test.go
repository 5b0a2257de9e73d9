package api_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/api"
	"github.com/checkpointd/checkpointd/redact"
	"github.com/checkpointd/checkpointd/store/storetest"
	"github.com/checkpointd/checkpointd/webhook"
)

// logLines parses a JSON log.
func logLines(t *testing.T, sink *syncBuffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(string(sink.Bytes())), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// TestRequestLogs: every line a request logs carries the request_id the
// response names in X-Request-Id — the access line, and the webhook
// handler's own warning — and no line carries the bearer token, a query
// string value or the body.
func TestRequestLogs(t *testing.T) {
	sink := &syncBuffer{}
	log := slog.New(api.LogHandler(slog.NewJSONHandler(sink, &slog.HandlerOptions{Level: slog.LevelDebug})))
	s := storetest.Open(t, storetest.SQLite, checkpointd.SystemClock{})
	d := loadDelivery(t, "09-push-fast-forward.json")
	h := &harness{t: t, store: s}
	h.handler = api.New(api.Deps{Store: api.StoresOf(s), Workflow: checkpointd.DefaultWorkflow(), DigestKey: testDigestKey, Logger: log,
		Webhook: &webhook.Handler{Verifier: &webhook.Verifier{Secrets: [][]byte{[]byte(d.Secret)}}, Store: s, Log: log}})
	h.operator = h.token(checkpointd.RoleOperator, nil)

	// An authenticated request with a query string.
	r := h.do("GET", "/v1/sessions?repo=secret-owner/secret-repo&limit=5", h.operator, nil).expect(t, 200, "")
	listID := r.header.Get("X-Request-Id")
	// A refused delivery: the handler logs a warning of its own.
	w := h.post(d, d.Body+" ", nil).expect(t, 401, "")
	hookID := w.header.Get("X-Request-Id")
	// A client's plain request id is kept; one that is not is replaced.
	req := httptest.NewRequest("GET", "/healthz", nil)
	req.Header.Set("X-Request-Id", "proxy-42.a:b")
	rec := httptest.NewRecorder()
	h.handler.ServeHTTP(rec, req)
	if got := rec.Header().Get("X-Request-Id"); got != "proxy-42.a:b" {
		t.Errorf("client request id not kept: %q", got)
	}
	req.Header.Set("X-Request-Id", "evil\nid with spaces")
	rec = httptest.NewRecorder()
	h.handler.ServeHTTP(rec, req)
	if got := rec.Header().Get("X-Request-Id"); got == "" || strings.ContainsAny(got, " \n") {
		t.Errorf("unsafe client request id kept: %q", got)
	}

	if listID == "" || hookID == "" || listID == hookID {
		t.Fatalf("request ids %q and %q", listID, hookID)
	}
	byID := map[string][]string{}
	for _, l := range logLines(t, sink) {
		id, _ := l["request_id"].(string)
		byID[id] = append(byID[id], l["msg"].(string))
		if l["msg"] == "request" {
			for _, k := range []string{"method", "route", "status", "duration"} {
				if l[k] == nil {
					t.Errorf("access line without %s: %v", k, l)
				}
			}
		}
	}
	if got := strings.Join(byID[listID], ","); got != "request" {
		t.Errorf("lines of the list request: %q, want one access line", got)
	}
	if got := strings.Join(byID[hookID], ","); got != "webhook delivery rejected,request" {
		t.Errorf("lines of the webhook request: %q, want the handler's warning and the access line", got)
	}
	all := string(sink.Bytes())
	for _, leak := range []string{h.operator, "secret-owner", "secret-repo", "Bearer", "operator/demo", d.Headers["X-Gitea-Signature"]} {
		if strings.Contains(all, leak) {
			t.Errorf("the log carries %q:\n%s", leak, all)
		}
	}
	if !strings.Contains(all, `"route":"/v1/sessions"`) || !strings.Contains(all, `"route":"/webhooks/gitea"`) {
		t.Errorf("access lines without route patterns:\n%s", all)
	}
}

// TestRequestIDNeverASecret: a client's X-Request-Id is echoed and logged
// in every line of its request, so one that redaction would change (a
// token, `token=…`) is not adopted: the request gets an id of the
// daemon's own, and the client's value is in neither the answer nor the
// log. Plain ids, including hex trace ids, are kept.
func TestRequestIDNeverASecret(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h, logs, _ := loggedHarness(t, b)
		send := func(id string) string {
			req := httptest.NewRequest("GET", "/v1/sessions", nil)
			req.Header.Set("Authorization", "Bearer "+h.reader)
			req.Header.Set("X-Request-Id", id)
			rec := httptest.NewRecorder()
			h.serve(rec, req)
			if rec.Code != 200 {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			return rec.Header().Get("X-Request-Id")
		}
		var planted []needle
		for _, e := range secretCorpus(t) {
			for _, id := range []string{e.secret, "token=" + e.secret} {
				red, _, _ := redact.String(id)
				if len(id) > 64 || red == id || strings.ContainsFunc(id, func(r rune) bool { return r <= ' ' || r > '~' }) {
					continue
				}
				got := send(id)
				if got == "" || got == id || strings.Contains(got, e.secret) {
					t.Errorf("secrets.txt:%d: X-Request-Id %q answered as %q", e.line, id, got)
				}
				planted = append(planted, needleFor(fmt.Sprintf("secrets.txt:%d", e.line), e.secret))
			}
		}
		if len(planted) < 40 {
			t.Fatalf("only %d token-shaped request ids planted", len(planted))
		}
		if leaked := found(logs.Bytes(), planted); leaked != nil {
			t.Errorf("the log holds %v", leaked)
		}
		for _, id := range []string{"proxy-42.a:b", "4bf92f3577b34da6a3ce929d0e0e4736", "00-4bf92f3577b34da6-01", "req_01a2310a298e7559"} {
			if got := send(id); got != id {
				t.Errorf("plain request id %q answered as %q", id, got)
			}
		}
	})
}

// TestLogLinesRedactWhatTheClientChose: the method and the path of a
// request are the client's too. A token-shaped method is logged redacted
// in the access line, and the path of a failed request (here the store
// is gone, so the token lookup fails with 503 and the failure is logged)
// is logged redacted.
func TestLogLinesRedactWhatTheClientChose(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h, logs, _ := loggedHarness(t, b)
		const ghp = "ghp_9XmjgiUy3eB9urqHKOQXJCj0i12B1tjYeNth" // github_token of secrets.txt
		req := httptest.NewRequest(ghp, "/v1/sessions", nil)
		req.Header.Set("Authorization", "Bearer "+h.reader)
		rec := httptest.NewRecorder()
		h.serve(rec, req)
		if rec.Code != 405 {
			t.Fatalf("method %s: %d, want 405", ghp, rec.Code)
		}
		if err := h.store.Close(); err != nil {
			t.Fatal(err)
		}
		h.do("GET", "/v1/sessions/"+ghp, h.reader, nil).expect(t, 503, "store_unavailable")
		log := logs.Bytes()
		if !strings.Contains(string(log), `"msg":"request failed"`) {
			t.Fatalf("the 503 was not logged: the search is blind:\n%s", log)
		}
		if strings.Contains(string(log), ghp) {
			t.Errorf("the log holds the token:\n%s", log)
		}
	})
}

// TestLogLevels: at info the log says what changed and what failed, one
// line each: an applied webhook delivery (its id, event and effects), an
// operator's action (who, on what, why); answered reads and heartbeats
// are debug lines, refusals stay at info.
func TestLogLevels(t *testing.T) {
	sink := &syncBuffer{}
	log := slog.New(slog.NewJSONHandler(sink, &slog.HandlerOptions{Level: slog.LevelInfo}))
	s := storetest.Open(t, storetest.SQLite, checkpointd.SystemClock{})
	d := loadDelivery(t, "09-push-fast-forward.json")
	h := &harness{t: t, store: s}
	h.handler = api.New(api.Deps{Store: api.StoresOf(s), Workflow: checkpointd.DefaultWorkflow(), DigestKey: testDigestKey, Logger: log,
		MaxDocumentBytes: 8 << 10, Webhook: &webhook.Handler{Verifier: &webhook.Verifier{Secrets: [][]byte{[]byte(d.Secret)}}, Store: s, Log: log}})
	h.operator = h.token(checkpointd.RoleOperator, nil)
	h.agent = h.token(checkpointd.RoleAgent, []string{"acme/*"})
	id, run, _ := h.newSession()
	sink.Reset()

	h.do("GET", "/v1/sessions", h.operator, nil).expect(t, 200, "")
	h.do("GET", "/v1/sessions/"+id+"/events", h.operator, nil).expect(t, 200, "")
	h.do("POST", "/v1/sessions/"+id+"/heartbeat", h.agent, map[string]any{"run_id": run}).expect(t, 200, "")
	if got := strings.TrimSpace(string(sink.Bytes())); got != "" {
		t.Errorf("answered reads and a heartbeat logged at info:\n%s", got)
	}
	h.do("GET", "/v1/sessions", "cpd_wrong", nil).expect(t, 401, "unauthorized")
	h.do("POST", "/v1/sessions/"+id+"/park", h.operator, map[string]any{"reason": "agent died"}).expect(t, 200, "")
	h.post(d, d.Body, nil).expect(t, 200, "")
	h.do("POST", "/v1/drain", h.operator, map[string]any{"reason": "deploy 1.4"}).expect(t, 201, "")
	h.do("POST", "/v1/drain/cancel", h.operator, nil).expect(t, 200, "")

	var got []string
	for _, l := range logLines(t, sink) {
		switch l["msg"] {
		case "request":
			got = append(got, fmt.Sprintf("request %v %v %v", l["method"], l["route"], l["status"]))
		case "operator action":
			got = append(got, fmt.Sprintf("action %v by %v on %v%v: %v", l["action"], l["actor"], l["session"], l["drain"], l["reason"]))
		case "webhook delivery":
			got = append(got, fmt.Sprintf("delivery %v %v %v refs=%v", l["delivery"], l["event"], l["outcome"], l["live_refs"]))
		default:
			got = append(got, fmt.Sprint(l["msg"]))
		}
	}
	var drainID string
	if st, err := s.ListDrains(t.Context(), "", 1); err == nil && len(st) == 1 {
		drainID = st[0].ID
	}
	want := []string{
		"request GET /v1/sessions 401",
		"action park by operator on " + id + "<nil>: agent died",
		"request POST /v1/sessions/{id}/park 200",
		"delivery " + d.Headers["X-Gitea-Delivery"] + " push applied refs=1",
		"action drain start by operator on <nil>" + drainID + ": deploy 1.4",
		"request POST /v1/drain 201",
		"action drain cancel by operator on <nil>" + drainID + ": <nil>",
		"request POST /v1/drain/cancel 200",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("info lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
