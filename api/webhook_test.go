package api_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/api"
	"github.com/checkpointd/checkpointd/store/storetest"
	"github.com/checkpointd/checkpointd/webhook"
)

type delivery struct {
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
	Secret  string            `json:"secret"`
}

func loadDelivery(t *testing.T, name string) delivery {
	t.Helper()
	raw, err := os.ReadFile("../webhook/testdata/gitea/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var d delivery
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestResumeShowsDrift follows a session through real deliveries as an agent
// sees it: resumable while its head is the live head, not once a push
// moved the branch, with the drift in the answer.
func TestResumeShowsDrift(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newHarness(t, b)
		first := loadDelivery(t, "07-push-new-branch.json")
		h.handler = api.New(api.Deps{Store: api.StoresOf(h.store), Workflow: checkpointd.DefaultWorkflow(), DigestKey: testDigestKey,
			Webhook: &webhook.Handler{Verifier: &webhook.Verifier{Secrets: [][]byte{[]byte(first.Secret)}}, Store: h.store,
				Log: slog.New(slog.DiscardHandler)}})
		deliver := func(d delivery) response {
			req := httptest.NewRequest("POST", "/webhooks/gitea", strings.NewReader(d.Body))
			for k, v := range d.Headers {
				req.Header.Set(k, v)
			}
			rec := httptest.NewRecorder()
			h.serve(rec, req)
			r := response{status: rec.Code, header: rec.Header(), raw: rec.Body.Bytes()}
			_ = json.Unmarshal(r.raw, &r.body)
			return r.expect(t, 200, "")
		}
		var push struct{ After string }
		_ = json.Unmarshal([]byte(first.Body), &push)

		op := h.operator
		s := h.do("POST", "/v1/sessions", op, map[string]any{"repo": "operator/demo", "role": "author", "branch": "feature/alpha"}).expect(t, 201, "")
		id, run := s.str("session", "id"), s.str("run", "id")
		doc := checkpointDoc(run, 1, func(d map[string]any) {
			d["target"] = map[string]any{"repo": "operator/demo"}
			d["workspace"] = map[string]any{"branch": "feature/alpha", "head": push.After}
		})
		h.do("POST", "/v1/sessions/"+id+"/checkpoints", op, doc).expect(t, 201, "")
		res := h.do("GET", "/v1/sessions/"+id+"/resume", op, nil).expect(t, 200, "")
		if res.get("resumable") != false || res.get("live") != nil {
			t.Fatalf("resume before any evidence: %s", res.raw)
		}

		deliver(first)
		res = h.do("GET", "/v1/sessions/"+id+"/resume", op, nil).expect(t, 200, "")
		if res.get("resumable") != true || res.str("validity") != "valid" || res.str("live", "head") != push.After ||
			res.str("live", "source") != "webhook:"+first.Headers["X-Gitea-Delivery"] {
			t.Fatalf("resume after the branch push: %s", res.raw)
		}

		moved := loadDelivery(t, "09-push-fast-forward.json")
		deliver(moved)
		res = h.do("GET", "/v1/sessions/"+id+"/resume", op, nil).expect(t, 200, "")
		if res.get("resumable") != false || res.str("validity") != "stale" || res.str("live", "head") == push.After ||
			!strings.Contains(fmt.Sprint(res.get("reasons")), "stale") {
			t.Fatalf("resume after the branch moved: %s", res.raw)
		}
		stale := h.do("GET", "/v1/sessions?validity=stale", op, nil).expect(t, 200, "")
		if items := stale.get("items").([]any); len(items) != 1 || items[0].(map[string]any)["id"] != id {
			t.Fatalf("stale sessions: %s", stale.raw)
		}
	})
}
