package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/api"
	"github.com/checkpointd/checkpointd/reconcile"
	"github.com/checkpointd/checkpointd/reconcile/forgetest"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestResumeResolvesPendingMutation: resume answers a pending mutation with
// what the forge shows (a fake Gitea behind the real SDK client): not done,
// then done with its comment, and unknown with the reason while the forge
// is down — on both backends.
func TestResumeResolvesPendingMutation(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		forge := forgetest.New(t)
		forge.AddRepo(7, "acme/widgets")
		forge.SetPull("acme/widgets", forgetest.Pull{Number: 34, State: "open", HeadRef: "fix-12",
			HeadSHA: "0123456789abcdef0123456789abcdef01234567"})
		s := storetest.Open(t, b, checkpointd.SystemClock{})
		h := &harness{t: t, store: s}
		h.handler = api.New(api.Deps{Store: api.StoresOf(s), Workflow: checkpointd.DefaultWorkflow(), DigestKey: testDigestKey,
			MaxDocumentBytes: 8 << 10, Mutations: &reconcile.Resolver{Forge: reconcile.Gitea(forge.URL, "", 0), CacheFor: time.Nanosecond}})
		h.operator = h.token(checkpointd.RoleOperator, nil)
		h.agent = h.token(checkpointd.RoleAgent, []string{"acme/*"})
		id, run, tok := h.newSession()
		path := "/v1/sessions/" + id
		h.do("POST", path+"/checkpoints", h.agent, checkpointDoc(run, tok, func(d map[string]any) {
			d["pending_mutation"] = map[string]any{"kind": "gitea.pr.comment", "target": "acme/widgets!34",
				"idempotency_key": "reply-34", "summary": "answer the review"}
		})).expect(t, 201, "")

		res := h.do("GET", path+"/resume", h.agent, nil).expect(t, 200, "")
		if res.str("pending_mutation", "outcome") != "not_done" || res.str("pending_mutation", "idempotency_key") != "reply-34" ||
			res.str("pending_mutation", "checked_at") == "" || !reasonsHave(res, "pending_mutation_not_done") {
			t.Fatalf("resume before the comment: %s", res.raw)
		}

		forge.AddComment("acme/widgets", 34, forgetest.Comment{ID: 4242, Body: "Done.\n<!-- checkpointd:reply-34 -->", Updated: time.Now()})
		res = h.do("GET", path+"/resume", h.agent, nil).expect(t, 200, "")
		if res.str("pending_mutation", "outcome") != "done" || res.num("pending_mutation", "evidence", "comment_id") != 4242 ||
			!strings.Contains(res.str("pending_mutation", "evidence", "url"), "issuecomment-4242") || !reasonsHave(res, "pending_mutation_done") {
			t.Fatalf("resume after the comment: %s", res.raw)
		}
		t.Logf("resume with a resolved mutation: %s", res.raw)

		forge.Intercept(forgetest.Status("/comments", http.StatusBadGateway, ""))
		res = h.do("GET", path+"/resume", h.agent, nil).expect(t, 200, "")
		if res.str("pending_mutation", "outcome") != "unknown" || !strings.Contains(res.str("pending_mutation", "reason"), "502") ||
			!reasonsHave(res, "pending_mutation_outcome_unknown") {
			t.Fatalf("resume with the forge down: %s", res.raw)
		}
	})
}

func reasonsHave(r response, word string) bool {
	for _, e := range r.get("explanations").([]any) {
		if e.(map[string]any)["reason"] == word {
			return true
		}
	}
	return false
}
