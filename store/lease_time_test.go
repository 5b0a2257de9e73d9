package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// expiring is a session valid and ready for a running drain whose latest
// checkpoint names one lease; the clock stands a microsecond before that
// lease's expires_at, and the expiry worker never runs.
type expiring struct {
	s     *store.Store
	clock *checkpointd.ManualClock
	sess  *checkpointd.Session
	lease *checkpointd.Lease
}

func newExpiring(t *testing.T, b storetest.Backend) *expiring {
	t.Helper()
	clock := checkpointd.NewManualClock(t0)
	s := storetest.Open(t, b, clock)
	sess := drainSession(t, s, "acme/widgets", "author", "fix-12")
	push(t, s, sess, headA)
	startDrain(t, s)
	l := acquire(t, s, sess, checkpointd.Resource{Kind: checkpointd.ResourceBranch, Repo: "acme/widgets", Branch: "fix-12"})
	if cp := mustWrite(t, s, sess, withLeases(drainDoc(sess, headA), l)); !cp.Complete || cp.Validity != checkpointd.ValidityValid {
		t.Fatalf("checkpoint naming a held lease at the live head: complete %v, validity %s", cp.Complete, cp.Validity)
	}
	clock.Advance(l.ExpiresAt.Sub(clock.Now()) - time.Microsecond)
	e := &expiring{s: s, clock: clock, sess: sess, lease: l}
	if v := e.validity(t); v != checkpointd.ValidityValid {
		t.Fatalf("a microsecond before expires_at the session is %s, want valid", v)
	}
	if st := drainStatus(t, s, store.DrainQuery{}); st.Counts.Blocking != 0 {
		t.Fatalf("a microsecond before expires_at %d sessions block, want 0: %+v", st.Counts.Blocking, st.Blocking)
	}
	return e
}

func (e *expiring) validity(t *testing.T) checkpointd.Validity {
	t.Helper()
	got, err := e.s.GetSession(t.Context(), e.sess.ID)
	if err != nil {
		t.Fatalf("GetSession: %v", err)
	}
	return got.Validity
}

// TestValidityReadsReflectTime: a lease is lost at its expires_at whether
// or not the expiry worker ran. Right at that instant, after
// Settled (which the API calls before every answer that reports validity),
// every read says lease_lost: the session, the list, the latest checkpoint
// the resume verdict is read from, the lease itself, the drain status; and
// the drain decision, which settles by itself. Each read is tried on its
// own store, as the first thing after the instant, so none leans on
// another having caught up.
func TestValidityReadsReflectTime(t *testing.T) {
	lost := checkpointd.ValidityLeaseLost
	reads := []struct {
		name    string
		decides bool // a drain decision, which settles by itself
		check   func(t *testing.T, e *expiring)
	}{
		{"session", false, func(t *testing.T, e *expiring) {
			if v := e.validity(t); v != lost {
				t.Errorf("session validity %s, want %s", v, lost)
			}
		}},
		{"list", false, func(t *testing.T, e *expiring) {
			valid, err := e.s.ListSessions(t.Context(), store.SessionFilter{Validity: checkpointd.ValidityValid, Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			if len(valid) != 0 {
				t.Errorf("listing valid sessions finds %d, want none", len(valid))
			}
			all, err := e.s.ListSessions(t.Context(), store.SessionFilter{Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			if len(all) != 1 || all[0].Validity != lost {
				t.Errorf("list %+v, want the one session %s", all, lost)
			}
		}},
		{"latest checkpoint", false, func(t *testing.T, e *expiring) {
			cp, err := e.s.GetCheckpoint(t.Context(), e.sess.ID, 0)
			if err != nil {
				t.Fatal(err)
			}
			if cp.Validity != lost {
				t.Errorf("latest checkpoint validity %s, want %s", cp.Validity, lost)
			}
		}},
		{"lease", false, func(t *testing.T, e *expiring) {
			if l := getLease(t, e.s, e.lease.ID); l.State != checkpointd.LeaseExpired {
				t.Errorf("lease state %s, want %s", l.State, checkpointd.LeaseExpired)
			}
			held, err := e.s.ListLeases(t.Context(), store.LeaseFilter{State: checkpointd.LeaseHeld, Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			if len(held) != 0 {
				t.Errorf("%d leases listed as held, want none", len(held))
			}
		}},
		{"drain status", false, func(t *testing.T, e *expiring) {
			st := drainStatus(t, e.s, store.DrainQuery{})
			if st.Counts.Blocking != 1 || len(st.Blocking) != 1 || !slices.Contains(st.Blocking[0].Reasons, checkpointd.BlockLeaseLost) {
				t.Errorf("drain status counts %+v blocking %+v, want the session blocking with %s", st.Counts, st.Blocking, checkpointd.BlockLeaseLost)
			}
		}},
		{"drain decision", true, func(t *testing.T, e *expiring) {
			d, err := e.s.CompleteDrain(t.Context(), store.DrainCompletion{By: "tok_test", Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			blockedByLostLease(t, d)
		}},
		{"drain decision alone", true, func(t *testing.T, e *expiring) {
			// The decision itself, without the reads before it: a lease
			// that runs out between them must not be vouched for.
			d, err := store.DecideDrain(t.Context(), e.s, "tok_test", 10)
			if err != nil {
				t.Fatal(err)
			}
			blockedByLostLease(t, d)
		}},
	}
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		for _, r := range reads {
			t.Run(r.name, func(t *testing.T) {
				e := newExpiring(t, b)
				e.clock.Advance(time.Microsecond) // now == expires_at
				if !r.decides {
					if err := e.s.Settled(t.Context()); err != nil {
						t.Fatal(err)
					}
				}
				r.check(t, e)
				// What the read found is recorded as the worker would have.
				evs := eventsOf(t, e.s, e.sess.ID, checkpointd.EventLeaseExpired)
				if len(evs) != 1 {
					t.Errorf("%d lease.expired events, want 1", len(evs))
				}
				if n, err := e.s.ExpireLeases(context.Background(), 10); err != nil || n != 0 {
					t.Errorf("the worker then ends %d leases (%v), want 0", n, err)
				}
			})
		}
	})
}

func blockedByLostLease(t *testing.T, d *checkpointd.Drain) {
	t.Helper()
	if d.State != checkpointd.DrainRunning || d.Decision == nil || d.Decision.Outcome != checkpointd.DrainOutcomeBlocked {
		t.Fatalf("drain %s decision %+v, want still running, blocked", d.State, d.Decision)
	}
	if len(d.Decision.Blocking) != 1 || !slices.Contains(d.Decision.Blocking[0].Reasons, checkpointd.BlockLeaseLost) {
		t.Errorf("blocking %+v, want the session with %s", d.Decision.Blocking, checkpointd.BlockLeaseLost)
	}
}
