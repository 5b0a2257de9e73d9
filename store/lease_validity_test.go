package store_test

import (
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestLeaseLossAndRecoveryWithLiveEvidence: with a live head observed, an
// expired lease turns a valid session lease_lost, and re-acquiring plus a
// checkpoint naming the new grant makes it valid again.
func TestLeaseLossAndRecoveryWithLiveEvidence(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		clock := checkpointd.NewManualClock(t0)
		s := storetest.Open(t, b, clock)
		sess := newSession(t, s, "owner/name")
		head := "0123456789abcdef0123456789abcdef01234567"
		if _, err := s.Observe(ctx, []checkpointd.Observation{{Repo: "owner/name", Branch: "fix-12", Head: head,
			Authoritative: true, Source: "reconcile:test"}}); err != nil {
			t.Fatal(err)
		}
		res := checkpointd.Resource{Kind: checkpointd.ResourceBranch, Repo: "owner/name", Branch: "fix-12"}
		acquire := func() *checkpointd.Lease {
			l, err := s.AcquireLease(ctx, store.NewLease{Resource: res, SessionID: sess.ID, RunID: sess.CurrentRun.ID, TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		checkpointNaming := func(l *checkpointd.Lease) *checkpointd.Checkpoint {
			d := doc(sess.CurrentRun, "implementing")
			d.Leases = []checkpointd.LeaseRef{{LeaseID: l.ID, FencingToken: l.FencingToken}}
			cp, err := write(ctx, s, sess.ID, d)
			if err != nil {
				t.Fatal(err)
			}
			return cp
		}
		validity := func(want checkpointd.Validity) {
			t.Helper()
			got, err := s.GetSession(ctx, sess.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.Validity != want {
				t.Fatalf("validity %q (%s), want %q", got.Validity, got.ValidityReason, want)
			}
		}

		first := acquire()
		if cp := checkpointNaming(first); !cp.Complete || cp.Validity != checkpointd.ValidityValid {
			t.Fatalf("checkpoint at the live head naming a held lease: complete %v validity %q", cp.Complete, cp.Validity)
		}
		validity(checkpointd.ValidityValid)

		clock.Advance(2 * time.Minute)
		if n, err := s.ExpireLeases(ctx, 10); err != nil || n != 1 {
			t.Fatalf("ExpireLeases = %d, %v", n, err)
		}
		validity(checkpointd.ValidityLeaseLost)

		second := acquire()
		if second.FencingToken <= first.FencingToken {
			t.Fatalf("token went from %d to %d", first.FencingToken, second.FencingToken)
		}
		validity(checkpointd.ValidityLeaseLost) // re-acquiring alone proves nothing about the work
		if cp := checkpointNaming(second); cp.Validity != checkpointd.ValidityValid || !cp.Complete {
			t.Fatalf("checkpoint naming the new grant: complete %v validity %q", cp.Complete, cp.Validity)
		}
		validity(checkpointd.ValidityValid)
	})
}
