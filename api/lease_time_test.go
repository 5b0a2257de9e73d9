package api_test

import (
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestResumeRightAfterLeaseExpiry: the resume verdict, the session read and
// the session list say lease_lost (and resume resumable:false) at the
// instant the named lease's expires_at passes, though the expiry worker
// never ran.
func TestResumeRightAfterLeaseExpiry(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newLeaseHarness(t, b)
		a := h.session()
		head := "0123456789abcdef0123456789abcdef01234567"
		if _, err := h.store.Observe(t.Context(), []checkpointd.Observation{{Repo: "acme/widgets", Branch: "fix-12", Head: head,
			Authoritative: true, Source: "test"}}); err != nil {
			t.Fatal(err)
		}
		l := h.acquire(a, issue(12), 60)
		h.do("POST", "/v1/sessions/"+a.id+"/checkpoints", h.agent, checkpointDoc(a.run, a.tok, func(d map[string]any) {
			d["leases"] = []any{map[string]any{"lease_id": l["id"], "fencing_token": l["fencing_token"]}}
		})).expect(t, 201, "")
		resume := func() response {
			return h.do("GET", "/v1/sessions/"+a.id+"/resume", h.agent, nil).expect(t, 200, "")
		}
		h.clock.Advance(at(t, l["expires_at"]).Sub(h.clock.Now()) - time.Microsecond)
		if r := resume(); r.get("resumable") != true || r.str("validity") != "valid" {
			t.Fatalf("resume a microsecond before expiry: %s", r.raw)
		}

		h.clock.Advance(time.Microsecond)
		if r := resume(); r.get("resumable") != false || r.str("validity") != "lease_lost" {
			t.Errorf("resume at expires_at: %s", r.raw)
		}
		if v := h.do("GET", "/v1/sessions/"+a.id, h.reader, nil).expect(t, 200, "").str("session", "validity"); v != "lease_lost" {
			t.Errorf("session validity %s, want lease_lost", v)
		}
		list := h.do("GET", "/v1/sessions?validity=valid", h.reader, nil).expect(t, 200, "")
		if n := len(list.get("items").([]any)); n != 0 {
			t.Errorf("%d sessions listed as valid, want none", n)
		}
		if held := h.do("GET", "/v1/leases?state=held&session_id="+a.id, h.reader, nil).expect(t, 200, ""); len(held.get("items").([]any)) != 0 {
			t.Errorf("the lease still reads as held: %s", held.raw)
		}
	})
}
