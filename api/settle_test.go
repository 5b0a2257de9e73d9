package api_test

import (
	"fmt"
	"testing"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestAnswersSettleFirst: the store's reads only read, so the API brings
// the verdicts up to date (store.Settled) before every answer that reports
// one. Each answer below comes right after a push the store recorded but
// nobody settled (a delivery whose handler died before its settle): it
// reports the verdict of the push, never the one from before it.
func TestAnswersSettleFirst(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newHarness(t, b)
		a := h.agentSession("a", "acme/widgets", "author", "fix-12")
		h.push(a, headA)
		if r := h.checkpoint(a, a.doc(headA)).expect(t, 201, ""); r.str("checkpoint", "validity") != "valid" {
			t.Fatalf("checkpoint at the live head: %s", r.raw)
		}
		h.do("POST", "/v1/drain", h.operator, map[string]any{"reason": "deploy"}).expect(t, 201, "")
		answers := []struct {
			name string
			read func() checkpointd.Validity
		}{
			{"session", func() checkpointd.Validity {
				return checkpointd.Validity(h.do("GET", "/v1/sessions/"+a.id, h.reader, nil).expect(t, 200, "").str("session", "validity"))
			}},
			{"latest checkpoint", func() checkpointd.Validity {
				return checkpointd.Validity(h.do("GET", "/v1/sessions/"+a.id+"/checkpoints/latest", h.reader, nil).expect(t, 200, "").str("checkpoint", "validity"))
			}},
			{"resume", func() checkpointd.Validity {
				return checkpointd.Validity(h.do("GET", "/v1/sessions/"+a.id+"/resume", h.agent, nil).expect(t, 200, "").str("validity"))
			}},
			{"list", func() checkpointd.Validity {
				items, _ := h.do("GET", "/v1/sessions?validity=stale", h.reader, nil).expect(t, 200, "").get("items").([]any)
				if len(items) == 0 {
					return checkpointd.ValidityValid
				}
				return checkpointd.ValidityStale
			}},
			{"drain status", func() checkpointd.Validity {
				for _, bl := range h.drainView(h.operator).Blocking {
					for _, why := range bl.Reasons {
						if why == checkpointd.BlockStale {
							return checkpointd.ValidityStale
						}
					}
				}
				return checkpointd.ValidityValid
			}},
		}
		for i, ans := range answers {
			// Settled back at the checkpoint's head (valid), then a push
			// off it that nobody settles.
			h.record(a, fmt.Sprintf("back-%d", i), headB, headA)
			if err := h.store.Settle(t.Context()); err != nil {
				t.Fatal(err)
			}
			h.record(a, fmt.Sprintf("off-%d", i), headA, headB)
			if got := ans.read(); got != checkpointd.ValidityStale {
				t.Errorf("%s after an unsettled push off the checkpoint's head: %s, want stale", ans.name, got)
			}
		}
	})
}

// record records a push as a delivery does, without the settle that its
// handler runs after answering.
func (h *harness) record(a *agentSession, id, before, after string) {
	h.t.Helper()
	if _, dup, err := h.store.ApplyDelivery(h.t.Context(), store.DeliveryRecord{ID: id, Event: "push", Forge: "gitea", Repo: a.repo},
		[]checkpointd.Observation{{Repo: a.repo, Branch: a.branch, Before: before, Head: after, Source: "webhook:" + id}}); err != nil || dup {
		h.t.Fatalf("ApplyDelivery %s: duplicate %v, %v", id, dup, err)
	}
}
