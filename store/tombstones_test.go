package store_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

func acquireBranch(t *testing.T, s *store.Store, sess *checkpointd.Session, branch string) *checkpointd.Lease {
	t.Helper()
	l, err := s.AcquireLease(t.Context(), store.NewLease{SessionID: sess.ID, RunID: sess.CurrentRun.ID, TTL: time.Minute,
		Resource: checkpointd.Resource{Kind: checkpointd.ResourceBranch, Repo: sess.Repo, Branch: branch}})
	if err != nil {
		t.Fatalf("AcquireLease %s: %v", branch, err)
	}
	return l
}

// TestClearSession: a force-cleared session is gone with everything it
// owned, in one transaction, and leaves a tombstone: a late write from its
// old run, a takeover, an end, a lease naming it and every read answer
// ErrGone with the tombstone, never a resurrected session. Its leases are
// free again (fencing tokens keep growing), another session is untouched,
// and it no longer blocks a drain.
func TestClearSession(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		clock := checkpointd.NewManualClock(t0)
		s := storetest.Open(t, b, clock)

		victim := drainSession(t, s, "acme/widgets", "author", "fix-v")
		l := acquireBranch(t, s, victim, "fix-v")
		d := drainDoc(victim, headA)
		d.Leases = []checkpointd.LeaseRef{{LeaseID: l.ID, FencingToken: l.FencingToken}}
		mustWrite(t, s, victim, d)
		mustWrite(t, s, victim, d)
		if _, _, err := s.ClaimIdempotency(ctx, victim.ID, "key-1", "hmac-sha256:v1:00"); err != nil {
			t.Fatal(err)
		}
		other := drainSession(t, s, "acme/widgets", "author", "fix-o")
		mustWrite(t, s, other, drainDoc(other, headA))
		push(t, s, victim, headA)
		push(t, s, other, headA)
		before, err := s.GetSession(ctx, other.ID)
		if err != nil || before.Validity != checkpointd.ValidityValid {
			t.Fatalf("other before: %+v %v", before, err)
		}
		// A drain that the victim alone blocks.
		if _, _, err := s.StartDrain(ctx, "deploy", "op"); err != nil {
			t.Fatal(err)
		}
		mustWrite(t, s, other, drainDoc(other, headA))
		if st := drainStatus(t, s, store.DrainQuery{}); st.Counts.Blocking != 1 || st.Blocking[0].SessionID != victim.ID {
			t.Fatalf("drain before the clear: %+v", st.Counts)
		}

		clock.Advance(time.Minute)
		ts, err := s.ClearSession(ctx, victim.ID, "ops-alice", "stuck since the outage")
		if err != nil {
			t.Fatalf("ClearSession: %v", err)
		}
		want := checkpointd.Removed{Checkpoints: 2, Runs: 1, Events: 6, Leases: 1, LeasesReleased: 1, IdempotencyKeys: 1}
		if ts.Kind != checkpointd.TombstoneCleared || ts.By != "ops-alice" || !ts.At.Equal(t0.Add(time.Minute)) || ts.Removed != want ||
			ts.SessionState != checkpointd.SessionActive {
			t.Errorf("tombstone %+v, want removed %+v", ts, want)
		}

		// Everything naming the session answers gone, with the tombstone.
		late := drainDoc(victim, headA)
		for name, f := range map[string]func() error{
			"late write": func() error { _, err := write(ctx, s, victim.ID, late); return err },
			"takeover": func() error {
				_, err := s.StartRun(ctx, victim.ID, store.NewRun{Takeover: true})
				return err
			},
			"end": func() error {
				_, err := s.EndSession(ctx, victim.ID, victim.CurrentRun.ID, checkpointd.OutcomeAbandoned)
				return err
			},
			"lease": func() error {
				_, err := s.AcquireLease(ctx, store.NewLease{SessionID: victim.ID, RunID: victim.CurrentRun.ID, TTL: time.Minute,
					Resource: checkpointd.Resource{Kind: checkpointd.ResourceBranch, Repo: "acme/widgets", Branch: "x"}})
				return err
			},
			"get":         func() error { _, err := s.GetSession(ctx, victim.ID); return err },
			"checkpoint":  func() error { _, err := s.GetCheckpoint(ctx, victim.ID, 0); return err },
			"checkpoints": func() error { _, err := s.ListCheckpoints(ctx, victim.ID, 0, 10); return err },
			"events":      func() error { _, err := s.ListEvents(ctx, victim.ID, 0, 10); return err },
			"clear again": func() error { _, err := s.ClearSession(ctx, victim.ID, "ops-bob", ""); return err },
		} {
			err := f()
			var gone *checkpointd.GoneError
			if !errors.As(err, &gone) || gone.Tombstone.Kind != checkpointd.TombstoneCleared || !gone.Tombstone.At.Equal(ts.At) {
				t.Errorf("%s: %v, want ErrGone with the tombstone", name, err)
			}
		}
		if _, err := s.GetSession(ctx, victim.ID); !errors.Is(err, checkpointd.ErrGone) {
			t.Errorf("GetSession resurrected the session: %v", err)
		}
		if _, err := s.ClearSession(ctx, "ses_never", "op", ""); !errors.Is(err, checkpointd.ErrNotFound) {
			t.Errorf("clear of an unknown session: %v", err)
		}

		// The audit record survives, and says it all.
		kept, err := s.Tombstone(ctx, victim.ID)
		if err != nil || kept.Reason != "stuck since the outage" || kept.Removed != want || kept.Repo != "acme/widgets" {
			t.Errorf("stored tombstone: %+v %v", kept, err)
		}

		// The lease is gone and its resource free; the token keeps growing.
		if _, err := s.GetLease(ctx, l.ID); !errors.Is(err, checkpointd.ErrNotFound) {
			t.Errorf("cleared lease: %v", err)
		}
		nl := acquireBranch(t, s, other, "fix-v")
		if nl.FencingToken <= l.FencingToken {
			t.Errorf("token after the clear %d, want more than %d", nl.FencingToken, l.FencingToken)
		}

		// The other session is untouched; the drain is no longer blocked.
		after, err := s.GetSession(ctx, other.ID)
		if err != nil || after.Validity != checkpointd.ValidityValid || after.Latest.Seq != before.Latest.Seq+1 {
			t.Errorf("other after: %+v %v", after, err)
		}
		if st := drainStatus(t, s, store.DrainQuery{}); st.Counts.Blocking != 0 || st.Counts.Active != 1 {
			t.Errorf("drain after the clear: %+v", st.Counts)
		}
		if dd, err := s.CompleteDrain(ctx, store.DrainCompletion{By: "op", Limit: 10}); err != nil || dd.State != checkpointd.DrainCompleted {
			t.Errorf("complete after the clear: %+v %v", dd, err)
		}
		if _, err := s.CancelDrain(ctx, "op"); err != nil {
			t.Fatal(err)
		}

		// New sessions are still created.
		if n := drainSession(t, s, "acme/widgets", "author", "fix-v"); n.ID == victim.ID {
			t.Error("a new session reused the cleared id")
		}
	})
}

// TestClearSessionAllOrNothing: when the clear fails midway (here: the
// tombstone insert, after every delete ran) nothing is removed; with the
// store unreachable it fails with ErrStoreUnavailable.
func TestClearSessionAllOrNothing(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		url := storetest.URL(t, b)
		s := storetest.OpenURL(t, url, checkpointd.NewManualClock(t0))
		victim := drainSession(t, s, "acme/widgets", "author", "fix-v")
		l := acquireBranch(t, s, victim, "fix-v")
		mustWrite(t, s, victim, drainDoc(victim, headA))

		raw := openRaw(t, b, url)
		failInsert := map[storetest.Backend][]string{
			storetest.SQLite: {`CREATE TRIGGER fail_tombstone BEFORE INSERT ON tombstones BEGIN SELECT RAISE(ABORT, 'injected failure'); END`},
			storetest.Postgres: {`CREATE FUNCTION fail_tombstone() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'injected failure'; END $$`,
				`CREATE TRIGGER fail_tombstone BEFORE INSERT ON tombstones FOR EACH ROW EXECUTE FUNCTION fail_tombstone()`},
		}
		for _, q := range failInsert[b] {
			if _, err := raw.Exec(q); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.ClearSession(ctx, victim.ID, "op", "boom"); !errors.Is(err, checkpointd.ErrStoreUnavailable) ||
			!strings.Contains(err.Error(), "injected failure") {
			t.Fatalf("clear with a failing tombstone insert: %v, want ErrStoreUnavailable from the injected failure", err)
		}
		intact := func() {
			t.Helper()
			sess, err := s.GetSession(ctx, victim.ID)
			if err != nil || sess.Latest == nil || sess.State != checkpointd.SessionActive {
				t.Fatalf("session after a failed clear: %+v %v", sess, err)
			}
			if got, err := s.GetLease(ctx, l.ID); err != nil || got.State != checkpointd.LeaseHeld {
				t.Errorf("lease after a failed clear: %+v %v", got, err)
			}
			if evs, err := s.ListEvents(ctx, victim.ID, 0, 50); err != nil || len(evs) != 4 {
				t.Errorf("events after a failed clear: %d %v", len(evs), err)
			}
			if _, err := s.Tombstone(ctx, victim.ID); !errors.Is(err, checkpointd.ErrNotFound) {
				t.Errorf("tombstone after a failed clear: %v", err)
			}
		}
		intact()

		closed := storetest.OpenURL(t, url, checkpointd.NewManualClock(t0))
		closed.Close()
		if _, err := closed.ClearSession(ctx, victim.ID, "op", ""); !errors.Is(err, checkpointd.ErrStoreUnavailable) {
			t.Errorf("clear on a closed store: %v", err)
		}
		intact()
	})
}

// TestClearSessionRacesWriters: writers of the session keep going while it
// is cleared. Each write either commits before the clear (and is removed
// with it) or answers ErrGone; nothing of the session is left behind.
func TestClearSessionRacesWriters(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		url := storetest.URL(t, b)
		s := storetest.OpenURL(t, url, checkpointd.SystemClock{})
		victim := drainSession(t, s, "acme/widgets", "author", "fix-v")
		l := acquireBranch(t, s, victim, "fix-v")

		// A writer stops at its first error, saying whether a renewal or a
		// checkpoint write met it.
		type stopped struct {
			renewal bool
			err     error
		}
		errs := make(chan stopped, 64)
		start := make(chan struct{})
		for w := range 4 {
			go func() {
				<-start
				for i := 0; ; i++ {
					var err error
					renewal := w == 0 && i%2 == 1
					if renewal {
						_, err = s.RenewLease(ctx, l.ID, victim.CurrentRun.ID, time.Minute)
					} else {
						_, err = write(ctx, s, victim.ID, drainDoc(victim, headA))
					}
					if err != nil {
						errs <- stopped{renewal, err}
						return
					}
				}
			}()
		}
		close(start)
		time.Sleep(20 * time.Millisecond)
		if _, err := s.ClearSession(ctx, victim.ID, "op", "race"); err != nil {
			t.Fatalf("ClearSession: %v", err)
		}
		for range 4 {
			st := <-errs
			switch {
			case errors.Is(st.err, checkpointd.ErrGone):
			case st.renewal && errors.Is(st.err, checkpointd.ErrNotFound):
				// the lease row went with the session (docs/retention.md)
			default:
				t.Errorf("a writer racing the clear (renewal %v): %v, want ErrGone (or ErrNotFound for its lease)", st.renewal, st.err)
			}
		}
		raw := openRaw(t, b, url)
		for _, table := range []string{"checkpoints", "events", "runs", "leases"} {
			var n int
			if err := raw.QueryRow(`SELECT COUNT(*) FROM `+table+` WHERE session_id = $1`, victim.ID).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Errorf("%d rows of %s left after the clear", n, table)
			}
		}
	})
}
