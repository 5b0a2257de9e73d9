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

// webhookHarness is a harness whose API also takes the real Gitea
// deliveries of webhook/testdata, signed with their own secret.
type webhookHarness struct {
	*harness
}

func newWebhookHarness(t *testing.T, b storetest.Backend) *webhookHarness {
	t.Helper()
	h := newHarness(t, b)
	// The captures were made with more than one hook secret.
	var secrets [][]byte
	for _, name := range []string{"07-push-new-branch.json", "41-pull_request-opened-pr8.json"} {
		secrets = append(secrets, []byte(loadDelivery(t, name).Secret))
	}
	h.handler = api.New(api.Deps{Store: api.StoresOf(h.store), Workflow: checkpointd.DefaultWorkflow(), DigestKey: testDigestKey,
		Webhook: &webhook.Handler{Verifier: &webhook.Verifier{Secrets: secrets}, Store: h.store,
			Log: slog.New(slog.DiscardHandler)}})
	return &webhookHarness{h}
}

// deliver posts a captured delivery; redelivery, when set, is the new
// delivery id a manual redelivery of the same body gets.
func (h *webhookHarness) deliver(name, redelivery string) {
	h.t.Helper()
	d := loadDelivery(h.t, name)
	req := httptest.NewRequest("POST", "/webhooks/gitea", strings.NewReader(d.Body))
	for k, v := range d.Headers {
		req.Header.Set(k, v)
	}
	if redelivery != "" {
		req.Header.Set("X-Gitea-Delivery", redelivery)
	}
	rec := httptest.NewRecorder()
	h.serve(rec, req)
	if rec.Code != 200 {
		h.t.Fatalf("delivery %s: %d %s", name, rec.Code, rec.Body)
	}
}

// session starts a session on operator/demo and writes a checkpoint at
// head (none when head is "").
func (h *webhookHarness) session(branch string, pr int64, head string) string {
	h.t.Helper()
	body := map[string]any{"repo": "operator/demo", "role": "author", "branch": branch}
	if pr > 0 {
		body["pr"] = pr
	}
	s := h.do("POST", "/v1/sessions", h.operator, body).expect(h.t, 201, "")
	id, run := s.str("session", "id"), s.str("run", "id")
	if head != "" {
		h.do("POST", "/v1/sessions/"+id+"/checkpoints", h.operator, checkpointDoc(run, 1, func(d map[string]any) {
			d["target"] = map[string]any{"repo": "operator/demo", "pr": pr}
			if pr == 0 {
				d["target"] = map[string]any{"repo": "operator/demo"}
			}
			d["workspace"] = map[string]any{"branch": branch, "head": head}
			if branch == "" {
				d["workspace"] = map[string]any{"head": head}
			}
		})).expect(h.t, 201, "")
	}
	return id
}

type resumeVerdict struct {
	Resumable    bool
	Validity     string
	Reasons      []string
	Explanations []struct{ Reason, Explanation string }
	Live         *struct{ Head, State string }
}

func (h *webhookHarness) resume(id string) resumeVerdict {
	h.t.Helper()
	r := h.do("GET", "/v1/sessions/"+id+"/resume", h.operator, nil).expect(h.t, 200, "")
	var v resumeVerdict
	if err := json.Unmarshal(r.raw, &v); err != nil {
		h.t.Fatal(err)
	}
	return v
}

// explained fails unless every reason of v carries an explanation and the
// one for word contains want.
func explained(t *testing.T, v resumeVerdict, word, want string) {
	t.Helper()
	if len(v.Explanations) != len(v.Reasons) {
		t.Fatalf("reasons %q, explanations %+v: want one explanation per reason", v.Reasons, v.Explanations)
	}
	found := false
	for i, e := range v.Explanations {
		if e.Explanation == "" || !strings.HasPrefix(v.Reasons[i], e.Reason) {
			t.Errorf("reason %q explained as %+v", v.Reasons[i], e)
		}
		if strings.HasSuffix(v.Reasons[i], ":") || v.Reasons[i] == string(checkpointd.ValidityUnverified) {
			t.Errorf("reason %q without its explanation", v.Reasons[i])
		}
		if e.Reason == word {
			found = true
			if !strings.Contains(e.Explanation, want) {
				t.Errorf("%s explained as %q, want …%s…", word, e.Explanation, want)
			}
		}
	}
	if !found {
		t.Errorf("no reason %s in %q", word, v.Reasons)
	}
}

// TestResumeExplainsEveryReason: a new session, its first checkpoint, an
// incomplete one, a pending mutation and an ended session: every entry of
// reasons has an explanation, and no validity is ever bare.
func TestResumeExplainsEveryReason(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newWebhookHarness(t, b)
		id := h.session("feature/alpha", 0, "")
		v := h.resume(id)
		explained(t, v, "no_checkpoint", "no checkpoint")

		s := h.do("GET", "/v1/sessions/"+id, h.operator, nil).expect(t, 200, "")
		if r := s.str("session", "validity_reason"); !strings.Contains(r, "no checkpoint written yet") {
			t.Errorf("a new session reads validity_reason %q", r)
		}
		run := s.str("session", "current_run", "id")
		h.do("POST", "/v1/sessions/"+id+"/checkpoints", h.operator, checkpointDoc(run, 1, func(d map[string]any) {
			d["target"] = map[string]any{"repo": "operator/demo"}
			d["workspace"] = map[string]any{"branch": "feature/alpha", "head": strings.Repeat("ab", 20)}
			delete(d, "next_action")
			d["pending_mutation"] = map[string]any{"kind": "pr.comment", "target": "operator/demo#1", "idempotency_key": "ik-77"}
		})).expect(t, 201, "")
		v = h.resume(id)
		explained(t, v, "unverified", "no live head observed yet")
		explained(t, v, "incomplete", "next_action")
		explained(t, v, "pending_mutation_outcome_unknown", "ik-77")

		h.do("POST", "/v1/sessions/"+id+"/end", h.operator, map[string]any{"run_id": run, "outcome": "abandoned"}).expect(t, 200, "")
		explained(t, h.resume(id), "session_ended", "abandoned")
	})
}

// TestResumeExplainsAmbiguousHead: after a manual redelivery of an old
// push (a new delivery id, the old body) the live head is ambiguous, and
// the explanation says so and names it — not "no live head observed".
func TestResumeExplainsAmbiguousHead(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newWebhookHarness(t, b)
		h.deliver("07-push-new-branch.json", "")
		h.deliver("09-push-fast-forward.json", "")
		h.deliver("11-push-force.json", "")
		var forced struct{ After string }
		_ = json.Unmarshal([]byte(loadDelivery(t, "11-push-force.json").Body), &forced)
		id := h.session("feature/alpha", 0, forced.After)
		if v := h.resume(id); v.Validity != "valid" {
			t.Fatalf("at the live head: %+v", v)
		}
		h.deliver("09-push-fast-forward.json", "redelivered-09")
		v := h.resume(id)
		if v.Validity != "unverified" || v.Live == nil || v.Live.State != "ambiguous" {
			t.Fatalf("after the redelivery: %+v", v)
		}
		explained(t, v, "unverified", "ambiguous")
		explained(t, v, "unverified", v.Live.Head)
		for _, r := range v.Reasons {
			if strings.Contains(r, "no live head observed") {
				t.Errorf("reason %q while live shows head %s", r, v.Live.Head)
			}
		}
	})
}

// TestInvalidatedSaysHow: a closed, a merged and a deleted pull request and
// a deleted branch each invalidate with their own explanation.
func TestInvalidatedSaysHow(t *testing.T) {
	for _, tc := range []struct {
		name       string
		deliveries []string
		branch     string
		pr         int64
		want       string
	}{
		{"pr closed", []string{"13-pull_request-opened.json", "18-pull_request-closed.json"}, "", 1, "pull request #1 was closed without being merged"},
		{"pr merged", []string{"13-pull_request-opened.json", "20-pull_request-closed-merged.json"}, "", 1, "pull request #1 was merged"},
		{"pr deleted", []string{"41-pull_request-opened-pr8.json", "43-pull_request-deleted-open-pr8.json"}, "", 8, "pull request #8 was deleted"},
		{"branch deleted", []string{"07-push-new-branch.json", "22-delete-branch.json"}, "feature/alpha", 0, "branch feature/alpha was deleted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			storetest.Each(t, func(t *testing.T, b storetest.Backend) {
				h := newWebhookHarness(t, b)
				id := h.session(tc.branch, tc.pr, strings.Repeat("cd", 20))
				for _, d := range tc.deliveries {
					h.deliver(d, "")
				}
				v := h.resume(id)
				if v.Validity != "invalidated" {
					t.Fatalf("after %v: %+v", tc.deliveries, v)
				}
				explained(t, v, "invalidated", tc.want)
			})
		})
	}
}
