package store_test

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// rcOpen opens a store on a fresh database with a manual clock, and a raw
// handle on the same database for setting up states no API call makes
// (rows a crash or an older version left behind).
func rcOpen(t *testing.T, b storetest.Backend) (*store.Store, *checkpointd.ManualClock, *sql.DB) {
	t.Helper()
	url := storetest.URL(t, b)
	clock := checkpointd.NewManualClock(t0)
	s := storetest.OpenURL(t, url, clock)
	driver, dsn := "postgres", url
	if b == storetest.SQLite {
		driver, dsn = "sqlite", "file:"+url+"?_pragma=busy_timeout(5000)"
	}
	raw, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	return s, clock, raw
}

func rcLeased(t *testing.T, s *store.Store, repo string, ttl time.Duration) (*checkpointd.Session, *checkpointd.Lease) {
	t.Helper()
	sess := newSession(t, s, repo)
	l, err := s.AcquireLease(t.Context(), store.NewLease{Resource: checkpointd.Resource{Kind: checkpointd.ResourceBranch, Repo: repo, Branch: "fix-12"},
		SessionID: sess.ID, RunID: sess.CurrentRun.ID, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	d := rcDoc(sess, "implementing")
	d.Leases = []checkpointd.LeaseRef{{LeaseID: l.ID, FencingToken: l.FencingToken}}
	if _, err := write(t.Context(), s, sess.ID, d); err != nil {
		t.Fatal(err)
	}
	return sess, l
}

// rcDoc is doc() about the session's own repo.
func rcDoc(sess *checkpointd.Session, stage string) *checkpointd.Document {
	d := doc(sess.CurrentRun, stage)
	d.Target.Repo = sess.Repo
	return d
}

func rcValidity(t *testing.T, s *store.Store, id string) checkpointd.Validity {
	t.Helper()
	sess, err := s.GetSession(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return sess.Validity
}

// TestReconcileLeases: an expired lease a checkpoint names ends and its
// session is lease_lost; a held lease whose run is not the session's
// current run is released with a lease.mismatch event; a checkpoint naming
// a lease its run no longer holds is judged lease_lost; a session whose
// lease was lost before a restart is lease_lost again after the reset.
func TestReconcileLeases(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		s, clock, raw := rcOpen(t, b)
		ctx := t.Context()
		expiring, _ := rcLeased(t, s, "acme/expiring", 30*time.Second)
		mismatched, ml := rcLeased(t, s, "acme/mismatched", time.Hour)
		vanished, vl := rcLeased(t, s, "acme/vanished", time.Hour)
		fine, fl := rcLeased(t, s, "acme/fine", time.Hour)
		if _, err := raw.Exec(`UPDATE leases SET run_id = 'run_ghost' WHERE id = '` + ml.ID + `'`); err != nil {
			t.Fatal(err)
		}
		if _, err := raw.Exec(`UPDATE leases SET state = 'released' WHERE id = '` + vl.ID + `'`); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)

		got, err := s.ReconcileLeases(ctx, "reconcile:rec_1")
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(store.LeaseReconcile{Expired: 1, Mismatched: 1, LeaseLost: 1, Audited: 4}, got); diff != "" {
			t.Errorf("ReconcileLeases (-want +got):\n%s", diff)
		}
		for id, want := range map[string]checkpointd.Validity{expiring.ID: checkpointd.ValidityLeaseLost,
			mismatched.ID: checkpointd.ValidityLeaseLost, vanished.ID: checkpointd.ValidityLeaseLost, fine.ID: checkpointd.ValidityUnverified} {
			if v := rcValidity(t, s, id); v != want {
				t.Errorf("session %s: %s, want %s", id, v, want)
			}
		}
		if l, _ := s.GetLease(ctx, ml.ID); l.State != checkpointd.LeaseReleased {
			t.Errorf("mismatched lease %s, want released", l.State)
		}
		if l, _ := s.GetLease(ctx, fl.ID); l.State != checkpointd.LeaseHeld {
			t.Errorf("a lease held by its current run was touched: %s", l.State)
		}
		ks := kinds(t, s, mismatched.ID)
		if i := slices.Index(ks, store.EventLeaseMismatch); i < 0 || !slices.Contains(ks[i:], checkpointd.EventLeaseReleased) {
			t.Errorf("mismatched session events %v, want lease.mismatch then lease.released", ks)
		}
		evs, _ := s.ListEvents(ctx, vanished.ID, 0, 100)
		if last := evs[len(evs)-1]; last.Kind != checkpointd.EventValidity || !jsonHas(last.Data, "lease_id", vl.ID) || !jsonHas(last.Data, "source", "reconcile:rec_1") {
			t.Errorf("vanished lease: last event %s %s, want the validity change citing the lease and the pass", last.Kind, last.Data)
		}

		// Nothing left to do: a second run changes nothing.
		if got, err := s.ReconcileLeases(ctx, "reconcile:rec_2"); err != nil || got != (store.LeaseReconcile{Audited: 4}) {
			t.Errorf("second ReconcileLeases: %+v %v", got, err)
		}
		// After a restart every session is unverified; the lease half of the
		// evidence is local, so the next reconcile restores lease_lost.
		if _, err := s.ResetValidity(ctx, "restart"); err != nil {
			t.Fatal(err)
		}
		if v := rcValidity(t, s, expiring.ID); v != checkpointd.ValidityUnverified {
			t.Fatalf("after reset: %s", v)
		}
		if got, err := s.ReconcileLeases(ctx, "reconcile:rec_3"); err != nil || got.LeaseLost != 3 {
			t.Errorf("after the reset: %+v %v, want 3 sessions lease_lost again", got, err)
		}
	})
}

// rcLeasedFive makes five leased sessions (rcLeased) on acme/<name>-<i>
// and returns key of each, sorted: the order an audit reads them in.
func rcLeasedFive(t *testing.T, s *store.Store, name string, key func(*checkpointd.Session, *checkpointd.Lease) string) []string {
	t.Helper()
	var keys []string
	for i := range 5 {
		keys = append(keys, key(rcLeased(t, s, fmt.Sprintf("acme/%s-%d", name, i), time.Hour)))
	}
	slices.Sort(keys)
	return keys
}

// TestReconcileLeasesAuditGoesRound: a pass audits a bounded slice of the
// active sessions for a checkpoint naming a lease its run does not hold,
// and the next pass goes on after it, round the fleet. A lease row ended
// outside the daemon (nothing re-judged its session) is found by the pass
// that reaches its session, and not before.
func TestReconcileLeasesAuditGoesRound(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		s, _, raw := rcOpen(t, b)
		ctx := t.Context()
		store.SetLeaseAuditChunk(t, 2)
		byID := rcLeasedFive(t, s, "audit", func(sess *checkpointd.Session, _ *checkpointd.Lease) string { return sess.ID })
		last := byID[len(byID)-1]
		if _, err := raw.Exec(`UPDATE leases SET state = 'released' WHERE session_id = '` + last + `'`); err != nil {
			t.Fatal(err)
		}
		for pass, want := range []store.LeaseReconcile{{Audited: 2}, {Audited: 2}, {Audited: 1, LeaseLost: 1}, {Audited: 2}} {
			got, err := s.ReconcileLeases(ctx, fmt.Sprintf("reconcile:rec_%d", pass))
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("pass %d: %+v, want %+v", pass, got, want)
			}
			wantValidity := checkpointd.ValidityUnverified
			if pass >= 2 {
				wantValidity = checkpointd.ValidityLeaseLost
			}
			if v := rcValidity(t, s, last); v != wantValidity {
				t.Errorf("after pass %d the session whose lease ended outside is %s, want %s", pass, v, wantValidity)
			}
		}
		// A slice that ends the fleet exactly: the next pass starts over
		// rather than audit nothing.
		store.SetLeaseAuditChunk(t, 5)
		for pass, want := range []int{3, 5, 5} {
			got, err := s.ReconcileLeases(ctx, "reconcile:rec_wrap")
			if err != nil || got.Audited != want {
				t.Errorf("wrap pass %d: %+v %v, want %d audited", pass, got, err, want)
			}
		}
	})
}

// TestReconcileMismatchAuditGoesRound: the check for held leases whose run
// is not their session's current run reads a bounded slice of the lease
// rows a pass, going round them: a lease moved to another run outside the
// daemon is released by the pass that reaches it, and not before.
func TestReconcileMismatchAuditGoesRound(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		s, _, raw := rcOpen(t, b)
		ctx := t.Context()
		store.SetLeaseAuditChunk(t, 2)
		byID := rcLeasedFive(t, s, "mismatch", func(_ *checkpointd.Session, l *checkpointd.Lease) string { return l.ID })
		last := byID[len(byID)-1]
		if _, err := raw.Exec(`UPDATE leases SET run_id = 'run_ghost' WHERE id = '` + last + `'`); err != nil {
			t.Fatal(err)
		}
		for pass, want := range []int{0, 0, 1, 0} {
			got, err := s.ReconcileLeases(ctx, fmt.Sprintf("reconcile:rec_%d", pass))
			if err != nil {
				t.Fatal(err)
			}
			if got.Mismatched != want {
				t.Errorf("pass %d: %+v, want %d mismatched", pass, got, want)
			}
		}
		if l, _ := s.GetLease(ctx, last); l.State != checkpointd.LeaseReleased {
			t.Errorf("the lease moved outside the daemon is %s, want released", l.State)
		}
	})
}

func jsonHas(data json.RawMessage, key, want string) bool {
	var m map[string]any
	_ = json.Unmarshal(data, &m)
	return m[key] == want
}

// TestActiveRefs: the distinct refs of active sessions that can still
// change, each with its sessions and whether one is unverified, however
// the repo is spelled.
func TestActiveRefs(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		s, _, raw := rcOpen(t, b)
		ctx := t.Context()
		mk := func(repo, branch string, pr int64, worktree string) string {
			sess, err := s.CreateSession(ctx, store.NewSession{Repo: repo, Role: "author", Branch: branch, PR: pr, Worktree: worktree})
			if err != nil {
				t.Fatal(err)
			}
			return sess.ID
		}
		a := mk("Acme/W", "main", 0, "/srv/w1")
		b2 := mk("acme/w", "main", 7, "")
		c := mk("acme/w", "", 7, "")
		mk("acme/w", "", 0, "") // issue only: no ref
		ended := mk("acme/w", "old", 0, "")
		sess, _ := s.GetSession(ctx, ended)
		if _, err := s.EndSession(ctx, ended, sess.CurrentRun.ID, checkpointd.OutcomeAbandoned); err != nil {
			t.Fatal(err)
		}
		gone := mk("acme/w", "gone", 0, "")
		if _, err := s.Observe(ctx, []checkpointd.Observation{{Repo: "acme/w", Branch: "gone", End: checkpointd.RefDeleted, Authoritative: true, Source: "t"}}); err != nil {
			t.Fatal(err)
		}
		set, err := s.ActiveRefs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := &store.ActiveSet{Sessions: 4, Repos: []string{"Acme/W"},
			// New sessions are unverified (no checkpoint yet): each ref
			// says so (reconcile asks about those first).
			Refs: []store.ActiveRef{{Repo: "Acme/W", Branch: "main", Sessions: []string{a, b2}, Unverified: true},
				{Repo: "acme/w", PR: 7, Sessions: []string{b2, c}, Unverified: true}},
			Worktrees: []store.ActiveWorktree{{SessionID: a, Repo: "Acme/W", Branch: "main", Path: "/srv/w1"}}}
		if diff := cmp.Diff(want, set); diff != "" {
			t.Errorf("ActiveRefs (-want +got):\n%s\n(gone session %s is invalidated)", diff, gone)
		}
		// Both sessions on main verified (c, on PR 7 alone, not).
		q := `UPDATE sessions SET validity = 'valid' WHERE id IN ('` + a + `', '` + b2 + `')`
		if _, err := raw.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
		if set, err = s.ActiveRefs(ctx); err != nil {
			t.Fatal(err)
		}
		if len(set.Refs) != 2 || set.Refs[0].Unverified || !set.Refs[1].Unverified {
			t.Errorf("refs once main's sessions are valid: %+v; want main not unverified, PR 7 unverified", set.Refs)
		}
	})
}

// TestMarkUnverified: sessions on refs the forge could not answer become
// unverified with the reason (lease_lost stays lease_lost, invalidated
// stays invalidated), and their live refs stop counting as evidence.
func TestMarkUnverified(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		s, clock, _ := rcOpen(t, b)
		ctx := t.Context()
		valid := newSession(t, s, "acme/w")
		if _, err := write(ctx, s, valid.ID, rcDoc(valid, "implementing")); err != nil {
			t.Fatal(err)
		}
		lost, _ := rcLeased(t, s, "acme/w", 30*time.Second)
		head := doc(valid.CurrentRun, "x").Workspace.Head
		if _, err := s.Observe(ctx, []checkpointd.Observation{{Repo: "acme/w", Branch: "fix-12", Head: head, Authoritative: true, Source: "t"}}); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		if _, err := s.ExpireLeases(ctx, 10); err != nil {
			t.Fatal(err)
		}
		if rcValidity(t, s, valid.ID) != checkpointd.ValidityValid || rcValidity(t, s, lost.ID) != checkpointd.ValidityLeaseLost {
			t.Fatal("setup: want one valid and one lease_lost session")
		}
		moved, err := s.MarkUnverified(ctx, []store.ActiveRef{{Repo: "ACME/w", Branch: "fix-12"}}, "the forge answered 503", "reconcile:rec_9")
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(map[string]int{"unverified": 1}, moved); diff != "" {
			t.Errorf("moved (-want +got):\n%s", diff)
		}
		got, _ := s.GetSession(ctx, valid.ID)
		if got.Validity != checkpointd.ValidityUnverified || got.ValidityReason != "the forge answered 503" {
			t.Errorf("valid session became %s (%s)", got.Validity, got.ValidityReason)
		}
		if rcValidity(t, s, lost.ID) != checkpointd.ValidityLeaseLost {
			t.Errorf("lease_lost session changed")
		}
		// The head held before is no evidence now: a checkpoint at it stays unverified.
		if _, err := write(ctx, s, valid.ID, rcDoc(valid, "again")); err != nil {
			t.Fatal(err)
		}
		if v := rcValidity(t, s, valid.ID); v != checkpointd.ValidityUnverified {
			t.Errorf("checkpoint after the forge failed: %s, want unverified", v)
		}
		// The write explained the verdict by the ambiguous head; the forge
		// failing again says why once more, and the same reason again
		// records nothing new.
		if _, err := s.MarkUnverified(ctx, []store.ActiveRef{{Repo: "acme/w", Branch: "fix-12"}}, "the forge answered 503", "reconcile:rec_10"); err != nil {
			t.Fatal(err)
		}
		n := len(kinds(t, s, valid.ID))
		if _, err := s.MarkUnverified(ctx, []store.ActiveRef{{Repo: "acme/w", Branch: "fix-12"}}, "the forge answered 503", "reconcile:rec_10"); err != nil {
			t.Fatal(err)
		}
		if len(kinds(t, s, valid.ID)) != n {
			t.Errorf("an unchanged verdict appended events")
		}
	})
}

// TestReconcileReports: none before the first pass; the newest after; a
// bounded number kept.
func TestReconcileReports(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		s, _, raw := rcOpen(t, b)
		ctx := t.Context()
		if _, err := s.LastReconcileReport(ctx); !errors.Is(err, checkpointd.ErrNotFound) {
			t.Fatalf("before any pass: %v, want ErrNotFound", err)
		}
		for i := range 60 {
			if err := s.SaveReconcileReport(ctx, fmt.Sprintf("rec_%03d", i), []byte(fmt.Sprintf(`{"id":"rec_%03d"}`, i))); err != nil {
				t.Fatal(err)
			}
		}
		last, err := s.LastReconcileReport(ctx)
		if err != nil || string(last) != `{"id":"rec_059"}` {
			t.Errorf("last report %s %v", last, err)
		}
		var n int
		if err := raw.QueryRow(`SELECT COUNT(*) FROM reconcile_reports`).Scan(&n); err != nil || n != 50 {
			t.Errorf("%d reports kept (%v), want 50", n, err)
		}
	})
}

// TestRepoRenames: an id learned for a name, then seen by a webhook under
// another name, is a rename; ids from webhooks under the session's own
// name are remembered across that webhook's rename.
func TestRepoRenames(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		s, _, _ := rcOpen(t, b)
		ctx := t.Context()
		observe := func(name string, id int64) {
			if _, err := s.Observe(ctx, []checkpointd.Observation{{Repo: name, RepoID: id, Branch: "x", Head: "ab", Source: "webhook:1"}}); err != nil {
				t.Fatal(err)
			}
		}
		observe("acme/hooked", 7)
		repos := []string{"Acme/Hooked", "acme/learned", "acme/quiet"}
		if got, err := s.RepoRenames(ctx, repos, map[string]int64{"acme/learned": 8}); err != nil || len(got) != 0 {
			t.Fatalf("before renames: %v %v", got, err)
		}
		observe("acme/hooked-new", 7)
		observe("other/learned", 8)
		got, err := s.RepoRenames(ctx, repos, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := []store.RepoRename{{Repo: "Acme/Hooked", RepoID: 7, NewName: "acme/hooked-new"}, {Repo: "acme/learned", RepoID: 8, NewName: "other/learned"}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("renames (-want +got):\n%s", diff)
		}
	})
}
