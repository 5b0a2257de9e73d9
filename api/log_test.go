package api_test

import (
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/api"
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
	h.handler = api.New(api.Deps{Store: s, Workflow: checkpointd.DefaultWorkflow(), DigestKey: testDigestKey, Logger: log,
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
