package store_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

const leaseTTL = time.Minute

func issueLease(n int64) checkpointd.Resource {
	return checkpointd.Resource{Kind: checkpointd.ResourceIssue, Repo: "owner/name", Number: n}
}

// acquire grants res to the session's current run for leaseTTL, or fails t.
func acquire(t *testing.T, s *store.Store, sess *checkpointd.Session, res checkpointd.Resource) *checkpointd.Lease {
	t.Helper()
	l, err := s.AcquireLease(t.Context(), store.NewLease{Resource: res, SessionID: sess.ID, RunID: sess.CurrentRun.ID, TTL: leaseTTL})
	if err != nil {
		t.Fatalf("AcquireLease %s: %v", res.Key(), err)
	}
	return l
}

func getLease(t *testing.T, s *store.Store, id string) *checkpointd.Lease {
	t.Helper()
	l, err := s.GetLease(t.Context(), id)
	if err != nil {
		t.Fatalf("GetLease %s: %v", id, err)
	}
	return l
}

func getSession(t *testing.T, s *store.Store, id string) *checkpointd.Session {
	t.Helper()
	sess, err := s.GetSession(t.Context(), id)
	if err != nil {
		t.Fatalf("GetSession %s: %v", id, err)
	}
	return sess
}

// withLeases is doc naming leases at their tokens.
func withLeases(d *checkpointd.Document, ls ...*checkpointd.Lease) *checkpointd.Document {
	d.Leases = nil
	for _, l := range ls {
		d.Leases = append(d.Leases, checkpointd.LeaseRef{LeaseID: l.ID, FencingToken: l.FencingToken})
	}
	return d
}

// leaseLog renders a session's events after seq `after` one line each, with
// the lease and validity evidence they carry, so a test can compare the
// whole log with cmp.Diff. Lease ids are replaced by the names in ids.
func leaseLog(t *testing.T, s *store.Store, sessionID string, after int64, ids map[string]string) []string {
	t.Helper()
	evs, err := s.ListEvents(t.Context(), sessionID, after, 500)
	if err != nil {
		t.Fatalf("ListEvents: %v", err)
	}
	name := func(v any) string {
		id, _ := v.(string)
		if n, ok := ids[id]; ok {
			return n
		}
		return id
	}
	var out []string
	for _, e := range evs {
		var d map[string]any
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Fatalf("event %d data: %v", e.Seq, err)
		}
		line := e.Kind
		switch e.Kind {
		case checkpointd.EventLeaseAcquired, checkpointd.EventLeaseMoved:
			line += fmt.Sprintf(" %s token=%v", name(d["lease_id"]), d["fencing_token"])
		case checkpointd.EventLeaseRenewed:
			line += " " + name(d["lease_id"])
		case checkpointd.EventLeaseReleased, checkpointd.EventLeaseExpired:
			line += fmt.Sprintf(" %s token=%v cause=%v", name(d["lease_id"]), d["fencing_token"], d["cause"])
		case checkpointd.EventValidity:
			line += fmt.Sprintf(" %v→%v", d["from"], d["to"])
			if id, ok := d["lease_id"]; ok {
				line += fmt.Sprintf(" %s cause=%v", name(id), d["cause"])
			}
			if seq, ok := d["checkpoint_seq"]; ok {
				line += fmt.Sprintf(" checkpoint=%v", seq)
			}
		}
		out = append(out, line)
	}
	return out
}

// lastSeq is the seq of the session's newest event.
func lastSeq(t *testing.T, s *store.Store, sessionID string) int64 {
	t.Helper()
	return int64(len(kinds(t, s, sessionID)))
}

// snapshot is what a rejected lease call must leave unchanged.
func snapshot(t *testing.T, s *store.Store, sessionIDs ...string) string {
	t.Helper()
	// Read as the API reads: after Settled.
	if err := s.Settled(t.Context()); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, id := range sessionIDs {
		sess := getSession(t, s, id)
		ls, err := s.ListLeases(t.Context(), store.LeaseFilter{SessionID: id, Limit: 500})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s %s %s events=%v\n", id, sess.State, sess.Validity, kinds(t, s, id))
		for _, l := range ls {
			fmt.Fprintf(&b, "  %s %s run=%s token=%d %s until %s\n", l.ID, l.Resource.Key(), l.Holder.RunID, l.FencingToken, l.State, l.ExpiresAt)
		}
	}
	return b.String()
}

// TestLeaseAcquireHasOneWinner: N sessions acquiring one free resource at
// once (spelling its repo in two cases) get exactly one grant; every other
// caller learns the winner from the error and leaves no trace.
func TestLeaseAcquireHasOneWinner(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		s := storetest.Open(t, b, checkpointd.SystemClock{})
		const n = 16
		sessions := make([]*checkpointd.Session, n)
		for i := range sessions {
			sessions[i] = newSession(t, s, "owner/name")
		}
		winners, held := contend(t, s, sessions, 7)
		if len(winners) != 1 {
			t.Fatalf("%d winners, want exactly 1", len(winners))
		}
		win := winners[0]
		if win.FencingToken != 1 || win.State != checkpointd.LeaseHeld {
			t.Errorf("winner token %d state %s, want 1 held", win.FencingToken, win.State)
		}
		if len(held) != n-1 {
			t.Errorf("%d lease_held answers, want %d", len(held), n-1)
		}
		for _, h := range held {
			if h.ID != win.ID || h.Holder != win.Holder || h.FencingToken != win.FencingToken {
				t.Errorf("lease_held names %+v, want the winner %+v", h, win)
			}
		}
		all, err := s.ListLeases(t.Context(), store.LeaseFilter{Resource: ptr(issueLease(7)), Limit: 500})
		if err != nil || len(all) != 1 {
			t.Fatalf("the resource has %d grants (%v), want 1", len(all), err)
		}
		for _, sess := range sessions {
			want := []string{"session.created", "run.started"}
			if sess.ID == win.Holder.SessionID {
				want = append(want, checkpointd.EventLeaseAcquired)
			}
			if diff := cmp.Diff(want, kinds(t, s, sess.ID)); diff != "" {
				t.Errorf("session %s log (-want +got):\n%s", sess.ID, diff)
			}
		}
	})
}

// TestLeaseAcquireExpiredHasOneWinner: when the grant in force has expired,
// N contenders still get exactly one new grant, and the stale grant is
// reaped exactly once, with its event on the old holder's session.
func TestLeaseAcquireExpiredHasOneWinner(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		clock := checkpointd.NewManualClock(t0)
		s := storetest.Open(t, b, clock)
		old := newSession(t, s, "owner/name")
		stale := acquire(t, s, old, issueLease(7))
		const n = 16
		sessions := make([]*checkpointd.Session, n)
		for i := range sessions {
			sessions[i] = newSession(t, s, "owner/name")
		}
		clock.Advance(leaseTTL)
		winners, held := contend(t, s, sessions, 7)
		if len(winners) != 1 || len(held) != n-1 {
			t.Fatalf("%d winners and %d lease_held, want 1 and %d", len(winners), len(held), n-1)
		}
		if winners[0].FencingToken != 2 {
			t.Errorf("new grant token %d, want 2", winners[0].FencingToken)
		}
		if got := getLease(t, s, stale.ID); got.State != checkpointd.LeaseExpired || got.EndedAt == nil || !got.EndedAt.Equal(t0.Add(leaseTTL)) {
			t.Errorf("stale grant %+v, want expired at %v", got, t0.Add(leaseTTL))
		}
		want := []string{"session.created", "run.started", "lease.acquired stale token=1",
			"lease.expired stale token=1 cause=expired"}
		if diff := cmp.Diff(want, leaseLog(t, s, old.ID, 0, map[string]string{stale.ID: "stale"})); diff != "" {
			t.Errorf("old holder's log (-want +got):\n%s", diff)
		}
	})
}

// contend has every session acquire issue n of owner/name at once and
// returns the grants and the holders named by lease_held answers.
func contend(t *testing.T, s *store.Store, sessions []*checkpointd.Session, n int64) (winners, held []*checkpointd.Lease) {
	t.Helper()
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for i, sess := range sessions {
		res := issueLease(n)
		if i%2 == 1 {
			res.Repo = "Owner/NAME" // the same resource: forge names compare case-insensitively
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			l, err := s.AcquireLease(t.Context(), store.NewLease{Resource: res, SessionID: sess.ID, RunID: sess.CurrentRun.ID, TTL: leaseTTL})
			mu.Lock()
			defer mu.Unlock()
			var he *store.LeaseHeldError
			switch {
			case err == nil:
				winners = append(winners, l)
			case errors.As(err, &he) && errors.Is(err, checkpointd.ErrLeaseHeld):
				held = append(held, he.Lease)
			default:
				t.Errorf("acquire: %v, want a grant or ErrLeaseHeld", err)
			}
		}()
	}
	close(start)
	wg.Wait()
	return winners, held
}

func ptr[T any](v T) *T { return &v }

// TestLeaseFencingTokenNeverGoesBack: a resource's token grows on every
// grant — after expiry, release, a move on takeover, a force-release and a
// daemon restart — and an ended grant keeps the token it had.
func TestLeaseFencingTokenNeverGoesBack(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		clock := checkpointd.NewManualClock(t0)
		url := storetest.URL(t, b)
		s := storetest.OpenURL(t, url, clock)
		a, c := newSession(t, s, "owner/name"), newSession(t, s, "owner/name")
		res := checkpointd.Resource{Kind: checkpointd.ResourceBranch, Repo: "owner/name", Branch: "fix-12"}

		var tokens []int64
		note := func(step string, l *checkpointd.Lease) {
			t.Helper()
			if len(tokens) > 0 && l.FencingToken <= tokens[len(tokens)-1] {
				t.Fatalf("%s: token %d after %v: went backwards or repeated", step, l.FencingToken, tokens)
			}
			tokens = append(tokens, l.FencingToken)
		}

		l1 := acquire(t, s, a, res)
		note("first acquire", l1)
		clock.Advance(leaseTTL)
		if n, err := s.ExpireLeases(ctx, 10); err != nil || n != 1 {
			t.Fatalf("ExpireLeases: %d, %v; want 1", n, err)
		}
		l2 := acquire(t, s, c, res)
		note("acquire after expiry", l2)
		if err := s.ReleaseLease(ctx, l2.ID, c.CurrentRun.ID, false); err != nil {
			t.Fatal(err)
		}
		l3 := acquire(t, s, a, res)
		note("acquire after release", l3)
		run2, err := s.StartRun(ctx, a.ID, store.NewRun{Takeover: true, Reason: "crash"})
		if err != nil {
			t.Fatal(err)
		}
		moved := getLease(t, s, l3.ID)
		note("move on takeover", moved)
		if moved.Holder.RunID != run2.ID {
			t.Fatalf("moved lease holder %s, want the new run %s", moved.Holder.RunID, run2.ID)
		}
		if err := s.ReleaseLease(ctx, l3.ID, "", true); err != nil {
			t.Fatalf("force release: %v", err)
		}
		l4 := acquire(t, s, c, res)
		note("acquire after force-release", l4)

		// Restart: the grant in force survives, and so does the counter.
		s.Close()
		s = storetest.OpenURL(t, url, clock)
		if _, err := s.AcquireLease(ctx, store.NewLease{Resource: res, SessionID: a.ID, RunID: run2.ID, TTL: leaseTTL}); !errors.Is(err, checkpointd.ErrLeaseHeld) {
			t.Fatalf("acquire of a held resource after restart: %v, want ErrLeaseHeld", err)
		}
		clock.Advance(leaseTTL)
		a = getSession(t, s, a.ID)
		l5 := acquire(t, s, a, res)
		note("acquire after restart and expiry", l5)
		if err := s.ReleaseLease(ctx, l5.ID, run2.ID, false); err != nil {
			t.Fatal(err)
		}
		s.Close()
		s = storetest.OpenURL(t, url, clock)
		l6 := acquire(t, s, getSession(t, s, c.ID), res)
		note("acquire after restart of a free resource", l6)

		if diff := cmp.Diff([]int64{1, 2, 3, 4, 5, 6, 7}, tokens); diff != "" {
			t.Errorf("tokens (-want +got):\n%s", diff)
		}
		// Every ended grant keeps its last token; the list is newest first.
		list, err := s.ListLeases(ctx, store.LeaseFilter{Resource: &res, Limit: 50})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, l := range list {
			got = append(got, fmt.Sprintf("%d %s", l.FencingToken, l.State))
		}
		want := []string{"7 held", "6 released", "5 expired", "4 released", "2 released", "1 expired"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("grants of the resource, newest first (-want +got):\n%s", diff)
		}
	})
}

// TestLeaseRenew: the holder extends its lease from now; anyone else, or the
// holder after expiry, gets ErrLeaseLost and changes nothing.
func TestLeaseRenew(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		clock := checkpointd.NewManualClock(t0)
		s := storetest.Open(t, b, clock)
		a, other := newSession(t, s, "owner/name"), newSession(t, s, "owner/name")
		l := acquire(t, s, a, issueLease(1))
		if !l.ExpiresAt.Equal(t0.Add(leaseTTL)) || !l.AcquiredAt.Equal(t0) {
			t.Fatalf("grant acquired %v expires %v, want %v and %v", l.AcquiredAt, l.ExpiresAt, t0, t0.Add(leaseTTL))
		}

		clock.Advance(50 * time.Second)
		r, err := s.RenewLease(ctx, l.ID, a.CurrentRun.ID, 2*leaseTTL)
		if err != nil {
			t.Fatal(err)
		}
		wantExp := t0.Add(50*time.Second + 2*leaseTTL)
		if !r.ExpiresAt.Equal(wantExp) || r.FencingToken != l.FencingToken || r.State != checkpointd.LeaseHeld {
			t.Errorf("renewed %+v, want expiry %v with the same token", r, wantExp)
		}
		if got := getLease(t, s, l.ID); !got.ExpiresAt.Equal(wantExp) {
			t.Errorf("stored expiry %v, want %v", got.ExpiresAt, wantExp)
		}
		// The resource is still held past the original expiry.
		clock.Advance(leaseTTL)
		if _, err := s.AcquireLease(ctx, store.NewLease{Resource: issueLease(1), SessionID: other.ID, RunID: other.CurrentRun.ID, TTL: leaseTTL}); !errors.Is(err, checkpointd.ErrLeaseHeld) {
			t.Fatalf("acquire of a renewed lease past its first expiry: %v, want ErrLeaseHeld", err)
		}
		if n, err := s.ExpireLeases(ctx, 10); err != nil || n != 0 {
			t.Fatalf("ExpireLeases expired %d (%v) renewed leases", n, err)
		}

		before := snapshot(t, s, a.ID, other.ID)
		for name, run := range map[string]string{"another session's run": other.CurrentRun.ID, "unknown run": "run_00000000000000000000000000000000"} {
			if _, err := s.RenewLease(ctx, l.ID, run, leaseTTL); !errors.Is(err, checkpointd.ErrLeaseLost) {
				t.Errorf("renew by %s: %v, want ErrLeaseLost", name, err)
			}
		}
		if _, err := s.RenewLease(ctx, "lse_00000000000000000000000000000000", a.CurrentRun.ID, leaseTTL); !errors.Is(err, checkpointd.ErrNotFound) {
			t.Errorf("renew of an unknown lease: %v, want ErrNotFound", err)
		}
		if after := snapshot(t, s, a.ID, other.ID); after != before {
			t.Errorf("rejected renewals changed state:\n%s→\n%s", before, after)
		}
		// Past its expiry the holder has lost it, even before anything
		// ended it; and a late renewal changes nothing but what time did
		// (a read ends the grant, as the worker would).
		clock.Advance(leaseTTL)
		if _, err := s.RenewLease(ctx, l.ID, a.CurrentRun.ID, leaseTTL); !errors.Is(err, checkpointd.ErrLeaseLost) {
			t.Errorf("renew after expiry: %v, want ErrLeaseLost", err)
		}
		late := snapshot(t, s, a.ID, other.ID)
		if _, err := s.RenewLease(ctx, l.ID, a.CurrentRun.ID, leaseTTL); !errors.Is(err, checkpointd.ErrLeaseLost) {
			t.Errorf("renew after expiry: %v, want ErrLeaseLost", err)
		}
		if after := snapshot(t, s, a.ID, other.ID); after != late {
			t.Errorf("a late renewal changed state:\n%s→\n%s", late, after)
		}
		if n, err := s.ExpireLeases(ctx, 10); err != nil || n != 0 {
			t.Fatalf("ExpireLeases after the reads: %d (%v), want 0: the reads ended it", n, err)
		}
		if _, err := s.RenewLease(ctx, l.ID, a.CurrentRun.ID, leaseTTL); !errors.Is(err, checkpointd.ErrLeaseLost) {
			t.Errorf("renew of an expired (reaped) lease: %v, want ErrLeaseLost", err)
		}
		want := []string{"session.created", "run.started", "lease.acquired l token=1", "lease.renewed l",
			"lease.expired l token=1 cause=expired"}
		if diff := cmp.Diff(want, leaseLog(t, s, a.ID, 0, map[string]string{l.ID: "l"})); diff != "" {
			t.Errorf("log (-want +got):\n%s", diff)
		}
	})
}

// TestLeaseRelease: the holder releases a lease it holds; a second release,
// another run, or the holder after expiry get ErrLeaseLost; an operator
// force-releases any held lease; the resource is free afterwards.
func TestLeaseRelease(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		clock := checkpointd.NewManualClock(t0)
		s := storetest.Open(t, b, clock)
		a, other := newSession(t, s, "owner/name"), newSession(t, s, "owner/name")
		l1 := acquire(t, s, a, issueLease(1))
		l2 := acquire(t, s, a, issueLease(2))
		l3 := acquire(t, s, a, issueLease(3))

		before := snapshot(t, s, a.ID, other.ID)
		if err := s.ReleaseLease(ctx, l1.ID, other.CurrentRun.ID, false); !errors.Is(err, checkpointd.ErrLeaseLost) {
			t.Errorf("release by another run: %v, want ErrLeaseLost", err)
		}
		if err := s.ReleaseLease(ctx, "lse_00000000000000000000000000000000", a.CurrentRun.ID, false); !errors.Is(err, checkpointd.ErrNotFound) {
			t.Errorf("release of an unknown lease: %v, want ErrNotFound", err)
		}
		if err := s.ReleaseLease(ctx, "lse_00000000000000000000000000000000", "", true); !errors.Is(err, checkpointd.ErrNotFound) {
			t.Errorf("force release of an unknown lease: %v, want ErrNotFound", err)
		}
		if after := snapshot(t, s, a.ID, other.ID); after != before {
			t.Errorf("rejected releases changed state:\n%s→\n%s", before, after)
		}

		clock.Advance(time.Second)
		if err := s.ReleaseLease(ctx, l1.ID, a.CurrentRun.ID, false); err != nil {
			t.Fatalf("release by the holder: %v", err)
		}
		got := getLease(t, s, l1.ID)
		if got.State != checkpointd.LeaseReleased || got.EndedAt == nil || !got.EndedAt.Equal(t0.Add(time.Second)) {
			t.Errorf("released lease %+v", got)
		}
		if err := s.ReleaseLease(ctx, l1.ID, a.CurrentRun.ID, false); !errors.Is(err, checkpointd.ErrLeaseLost) {
			t.Errorf("second release: %v, want ErrLeaseLost", err)
		}
		if err := s.ReleaseLease(ctx, l1.ID, "", true); !errors.Is(err, checkpointd.ErrLeaseLost) {
			t.Errorf("force release of a released lease: %v, want ErrLeaseLost", err)
		}
		if err := s.ReleaseLease(ctx, l2.ID, "", true); err != nil {
			t.Fatalf("force release: %v", err)
		}
		if err := s.ReleaseLease(ctx, l2.ID, a.CurrentRun.ID, false); !errors.Is(err, checkpointd.ErrLeaseLost) {
			t.Errorf("holder's release after a force release: %v, want ErrLeaseLost", err)
		}
		// Freed resources pass on at once, with higher tokens.
		if n1 := acquire(t, s, other, issueLease(1)); n1.FencingToken != 2 {
			t.Errorf("re-grant of a released resource: token %d, want 2", n1.FencingToken)
		}
		if n2 := acquire(t, s, other, issueLease(2)); n2.FencingToken != 2 {
			t.Errorf("re-grant of a force-released resource: token %d, want 2", n2.FencingToken)
		}

		// Past its expiry, before anything ended it and after a read did.
		clock.Advance(leaseTTL)
		if err := s.ReleaseLease(ctx, l3.ID, a.CurrentRun.ID, false); !errors.Is(err, checkpointd.ErrLeaseLost) {
			t.Errorf("release after expiry: %v, want ErrLeaseLost", err)
		}
		before = snapshot(t, s, a.ID)
		if err := s.ReleaseLease(ctx, l3.ID, a.CurrentRun.ID, false); !errors.Is(err, checkpointd.ErrLeaseLost) {
			t.Errorf("release after expiry: %v, want ErrLeaseLost", err)
		}
		if after := snapshot(t, s, a.ID); after != before {
			t.Errorf("a late release changed state:\n%s→\n%s", before, after)
		}
		// The read after l3's expiry ended it, as the worker would have.
		want := []string{"session.created", "run.started",
			"lease.acquired l1 token=1", "lease.acquired l2 token=1", "lease.acquired l3 token=1",
			"lease.released l1 token=1 cause=released", "lease.released l2 token=1 cause=force_released",
			"lease.expired l3 token=1 cause=expired"}
		if diff := cmp.Diff(want, leaseLog(t, s, a.ID, 0, map[string]string{l1.ID: "l1", l2.ID: "l2", l3.ID: "l3"})); diff != "" {
			t.Errorf("log (-want +got):\n%s", diff)
		}
	})
}

// TestLeaseAcquireRejected: requests the store must refuse, each with its
// documented error and no change of state.
func TestLeaseAcquireRejected(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		clock := checkpointd.NewManualClock(t0)
		s := storetest.Open(t, b, clock)
		a, other := newSession(t, s, "owner/name"), newSession(t, s, "owner/name")
		oldRun := a.CurrentRun.ID
		if _, err := s.StartRun(ctx, a.ID, store.NewRun{Takeover: true}); err != nil {
			t.Fatal(err)
		}
		a = getSession(t, s, a.ID)
		ended := newSession(t, s, "owner/name")
		if _, err := s.EndSession(ctx, ended.ID, ended.CurrentRun.ID, checkpointd.OutcomeAbandoned); err != nil {
			t.Fatal(err)
		}
		foreign := newSession(t, s, "other/repo")
		held := acquire(t, s, other, issueLease(9))

		cases := []struct {
			name string
			in   store.NewLease
			want error
		}{
			{"unknown session", store.NewLease{Resource: issueLease(1), SessionID: "ses_00000000000000000000000000000000", RunID: oldRun, TTL: leaseTTL}, checkpointd.ErrNotFound},
			{"superseded run", store.NewLease{Resource: issueLease(1), SessionID: a.ID, RunID: oldRun, TTL: leaseTTL}, checkpointd.ErrRunSuperseded},
			{"another session's run", store.NewLease{Resource: issueLease(1), SessionID: a.ID, RunID: other.CurrentRun.ID, TTL: leaseTTL}, checkpointd.ErrRunSuperseded},
			{"ended session", store.NewLease{Resource: issueLease(1), SessionID: ended.ID, RunID: ended.CurrentRun.ID, TTL: leaseTTL}, checkpointd.ErrSessionEnded},
			{"resource of another repo", store.NewLease{Resource: checkpointd.Resource{Kind: checkpointd.ResourcePR, Repo: "other/repo", Number: 1}, SessionID: a.ID, RunID: a.CurrentRun.ID, TTL: leaseTTL}, checkpointd.ErrInvalidRequest},
			{"out of scope", store.NewLease{Resource: checkpointd.Resource{Kind: checkpointd.ResourcePR, Repo: "other/repo", Number: 1}, SessionID: foreign.ID, RunID: foreign.CurrentRun.ID, TTL: leaseTTL,
				InScope: func(repo string) bool { return strings.HasPrefix(repo, "owner/") }}, checkpointd.ErrForbidden},
			{"held by another session", store.NewLease{Resource: issueLease(9), SessionID: a.ID, RunID: a.CurrentRun.ID, TTL: leaseTTL}, checkpointd.ErrLeaseHeld},
			{"held by the same session", store.NewLease{Resource: issueLease(9), SessionID: other.ID, RunID: other.CurrentRun.ID, TTL: leaseTTL}, checkpointd.ErrLeaseHeld},
		}
		ids := []string{a.ID, other.ID, ended.ID, foreign.ID}
		before := snapshot(t, s, ids...)
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				if _, err := s.AcquireLease(ctx, c.in); !errors.Is(err, c.want) {
					t.Fatalf("err %v, want %v", err, c.want)
				}
				if after := snapshot(t, s, ids...); after != before {
					t.Errorf("a rejected acquire changed state:\n%s→\n%s", before, after)
				}
			})
		}
		if got := getLease(t, s, held.ID); got.FencingToken != 1 || got.State != checkpointd.LeaseHeld {
			t.Errorf("refused acquires moved the token: %+v", got)
		}
	})
}

// TestLeaseTakeoverMovesLeases: a takeover hands the session's held leases
// to the new run with new tokens in its own transaction; the superseded run
// can no longer renew or release them, and checkpoints must name the new
// tokens. An expired grant is not moved.
func TestLeaseTakeoverMovesLeases(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		clock := checkpointd.NewManualClock(t0)
		s := storetest.Open(t, b, clock)
		a := newSession(t, s, "owner/name")
		run1 := a.CurrentRun
		gone := acquire(t, s, a, issueLease(3))
		clock.Advance(leaseTTL / 2)
		l1 := acquire(t, s, a, issueLease(1))
		l2 := acquire(t, s, a, checkpointd.Resource{Kind: checkpointd.ResourceBranch, Repo: "owner/name", Branch: "fix-12"})
		clock.Advance(leaseTTL / 2) // gone has expired, unreaped
		mark := lastSeq(t, s, a.ID)

		run2, err := s.StartRun(ctx, a.ID, store.NewRun{Takeover: true, Reason: "crash"})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range []*checkpointd.Lease{l1, l2} {
			m := getLease(t, s, l.ID)
			if m.Holder.RunID != run2.ID || m.FencingToken <= l.FencingToken || m.State != checkpointd.LeaseHeld || !m.ExpiresAt.Equal(l.ExpiresAt) {
				t.Errorf("moved lease %+v: want run %s, a token above %d, the same expiry", m, run2.ID, l.FencingToken)
			}
		}
		if g := getLease(t, s, gone.ID); g.Holder.RunID != run1.ID || g.FencingToken != 1 {
			t.Errorf("an expired grant was moved: %+v", g)
		}
		// The answer lists the moved leases as stored, new tokens and all,
		// and not the expired one.
		var stored []checkpointd.Lease
		for _, l := range []*checkpointd.Lease{l1, l2} {
			stored = append(stored, *getLease(t, s, l.ID))
		}
		slices.SortFunc(stored, func(a, b checkpointd.Lease) int { return strings.Compare(a.ID, b.ID) })
		if diff := cmp.Diff(stored, run2.Leases, cmpopts.EquateApproxTime(time.Microsecond)); diff != "" {
			t.Errorf("the takeover's leases (-stored +answered):\n%s", diff)
		}
		names := map[string]string{l1.ID: "l1", l2.ID: "l2", gone.ID: "gone"}
		want := []string{"run.superseded", "run.started", "lease.moved l1 token=2", "lease.moved l2 token=2"}
		if l1.ID > l2.ID {
			want[2], want[3] = "lease.moved l2 token=2", "lease.moved l1 token=2"
		}
		if diff := cmp.Diff(want, leaseLog(t, s, a.ID, mark, names)); diff != "" {
			t.Errorf("takeover log (-want +got):\n%s", diff)
		}
		evs, _ := s.ListEvents(ctx, a.ID, mark+2, 10)
		for _, e := range evs {
			var d map[string]any
			_ = json.Unmarshal(e.Data, &d)
			if d["from_run"] != run1.ID || e.RunID != run2.ID {
				t.Errorf("lease.moved %s: from_run %v run %s, want %s → %s", e.Data, d["from_run"], e.RunID, run1.ID, run2.ID)
			}
		}

		// The superseded run is fenced off.
		before := snapshot(t, s, a.ID)
		if _, err := s.RenewLease(ctx, l1.ID, run1.ID, leaseTTL); !errors.Is(err, checkpointd.ErrLeaseLost) {
			t.Errorf("renew by the superseded run: %v, want ErrLeaseLost", err)
		}
		if err := s.ReleaseLease(ctx, l1.ID, run1.ID, false); !errors.Is(err, checkpointd.ErrLeaseLost) {
			t.Errorf("release by the superseded run: %v, want ErrLeaseLost", err)
		}
		if _, err := s.AcquireLease(ctx, store.NewLease{Resource: issueLease(4), SessionID: a.ID, RunID: run1.ID, TTL: leaseTTL}); !errors.Is(err, checkpointd.ErrRunSuperseded) {
			t.Errorf("acquire by the superseded run: %v, want ErrRunSuperseded", err)
		}
		if after := snapshot(t, s, a.ID); after != before {
			t.Errorf("the superseded run changed state:\n%s→\n%s", before, after)
		}

		// Completeness checks the new tokens.
		stale := withLeases(doc(run2.Run, "implementing"), l1)
		cp, err := write(ctx, s, a.ID, stale)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"lease:" + l1.ID}, cp.Missing); diff != "" {
			t.Errorf("a checkpoint naming the pre-takeover token: missing (-want +got):\n%s", diff)
		}
		cp, err = write(ctx, s, a.ID, withLeases(doc(run2.Run, "implementing"), getLease(t, s, l1.ID), getLease(t, s, l2.ID)))
		if err != nil || !cp.Complete {
			t.Fatalf("a checkpoint naming the moved leases: %+v, %v; want complete", cp, err)
		}
		if _, err := s.RenewLease(ctx, l1.ID, run2.ID, leaseTTL); err != nil {
			t.Errorf("renew by the new run: %v", err)
		}
		if err := s.ReleaseLease(ctx, l2.ID, run2.ID, false); err != nil {
			t.Errorf("release by the new run: %v", err)
		}
	})
}

// TestLeaseEndSessionReleases: ending a session releases every lease it
// holds, with an event each, and frees the resources.
func TestLeaseEndSessionReleases(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		clock := checkpointd.NewManualClock(t0)
		s := storetest.Open(t, b, clock)
		a, other := newSession(t, s, "owner/name"), newSession(t, s, "owner/name")
		l1 := acquire(t, s, a, issueLease(1))
		l2 := acquire(t, s, a, issueLease(2))
		if err := s.ReleaseLease(ctx, l2.ID, a.CurrentRun.ID, false); err != nil {
			t.Fatal(err)
		}
		if _, err := write(ctx, s, a.ID, withLeases(doc(a.CurrentRun, "done"), l1)); err != nil {
			t.Fatal(err)
		}
		mark := lastSeq(t, s, a.ID)
		clock.Advance(time.Second)
		if _, err := s.EndSession(ctx, a.ID, a.CurrentRun.ID, checkpointd.OutcomeCompleted); err != nil {
			t.Fatal(err)
		}
		if g := getLease(t, s, l1.ID); g.State != checkpointd.LeaseReleased || g.EndedAt == nil || !g.EndedAt.Equal(t0.Add(time.Second)) {
			t.Errorf("lease of an ended session: %+v, want released", g)
		}
		want := []string{"session.ended", "lease.released l1 token=1 cause=session_ended"}
		if diff := cmp.Diff(want, leaseLog(t, s, a.ID, mark, map[string]string{l1.ID: "l1"})); diff != "" {
			t.Errorf("end log (-want +got):\n%s", diff)
		}
		if v := getSession(t, s, a.ID).Validity; v != checkpointd.ValidityUnverified {
			t.Errorf("an ended session's validity moved to %s", v)
		}
		if n := acquire(t, s, other, issueLease(1)); n.FencingToken != 2 {
			t.Errorf("re-grant after the session ended: token %d, want 2", n.FencingToken)
		}
		if _, err := s.AcquireLease(ctx, store.NewLease{Resource: issueLease(5), SessionID: a.ID, RunID: a.CurrentRun.ID, TTL: leaseTTL}); !errors.Is(err, checkpointd.ErrSessionEnded) {
			t.Errorf("acquire for an ended session: %v, want ErrSessionEnded", err)
		}
	})
}

// TestLeaseExpiryFlipsValidity: the worker's ExpireLeases ends every lease
// whose time ran out, in batches of its limit, each with its event; a
// session whose latest checkpoint names an expired lease becomes lease_lost
// with the evidence, one that does not keep its validity. Re-acquiring and
// writing a checkpoint that names the new grant clears lease_lost — back to
// unverified, since no live head has been observed.
func TestLeaseExpiryFlipsValidity(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		clock := checkpointd.NewManualClock(t0)
		s := storetest.Open(t, b, clock)
		named, unnamed, renewer := newSession(t, s, "owner/name"), newSession(t, s, "owner/name"), newSession(t, s, "owner/name")
		ln := acquire(t, s, named, issueLease(1))
		lu := acquire(t, s, unnamed, issueLease(2))
		lr := acquire(t, s, renewer, issueLease(3))
		for _, c := range []struct {
			sess *checkpointd.Session
			l    *checkpointd.Lease
		}{{named, ln}, {unnamed, nil}, {renewer, lr}} {
			d := doc(c.sess.CurrentRun, "implementing")
			if c.l != nil {
				d = withLeases(d, c.l)
			}
			cp, err := write(ctx, s, c.sess.ID, d)
			if err != nil || !cp.Complete || cp.Validity != checkpointd.ValidityUnverified {
				t.Fatalf("checkpoint: %+v %v; want complete and unverified", cp, err)
			}
		}
		clock.Advance(leaseTTL - time.Second)
		if _, err := s.RenewLease(ctx, lr.ID, renewer.CurrentRun.ID, leaseTTL); err != nil {
			t.Fatal(err)
		}
		if n, err := s.ExpireLeases(ctx, 10); err != nil || n != 0 {
			t.Fatalf("before expiry: ExpireLeases %d (%v), want 0", n, err)
		}
		marks := map[string]int64{}
		for _, id := range []string{named.ID, unnamed.ID, renewer.ID} {
			marks[id] = lastSeq(t, s, id)
		}

		clock.Advance(time.Second) // expires_at is exclusive: at it, the lease is gone
		if n, err := s.ExpireLeases(ctx, 1); err != nil || n != 1 {
			t.Fatalf("ExpireLeases(1): %d, %v; want 1 (bounded by its limit)", n, err)
		}
		if n, err := s.ExpireLeases(ctx, 10); err != nil || n != 1 {
			t.Fatalf("ExpireLeases(10): %d, %v; want the 1 left", n, err)
		}
		if n, err := s.ExpireLeases(ctx, 10); err != nil || n != 0 {
			t.Fatalf("ExpireLeases again: %d, %v; want 0", n, err)
		}

		names := map[string]string{ln.ID: "ln", lu.ID: "lu", lr.ID: "lr"}
		if diff := cmp.Diff([]string{"lease.expired ln token=1 cause=expired", "validity.changed unverified→lease_lost ln cause=expired"},
			leaseLog(t, s, named.ID, marks[named.ID], names)); diff != "" {
			t.Errorf("named session's log (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"lease.expired lu token=1 cause=expired"}, leaseLog(t, s, unnamed.ID, marks[unnamed.ID], names)); diff != "" {
			t.Errorf("unnamed session's log (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string(nil), leaseLog(t, s, renewer.ID, marks[renewer.ID], names)); diff != "" {
			t.Errorf("renewed session's log (-want +got):\n%s", diff)
		}
		got := getSession(t, s, named.ID)
		if got.Validity != checkpointd.ValidityLeaseLost || got.ValidityReason == "" || !got.ValidityAt.Equal(t0.Add(leaseTTL)) {
			t.Errorf("named session validity %q (%q at %v), want lease_lost at %v", got.Validity, got.ValidityReason, got.ValidityAt, t0.Add(leaseTTL))
		}
		if cp, err := s.GetCheckpoint(ctx, named.ID, 0); err != nil || cp.Validity != checkpointd.ValidityLeaseLost {
			t.Errorf("latest checkpoint validity %v (%v), want lease_lost", cp, err)
		}
		for _, id := range []string{unnamed.ID, renewer.ID} {
			if v := getSession(t, s, id).Validity; v != checkpointd.ValidityUnverified {
				t.Errorf("session %s validity %s, want unverified (kept)", id, v)
			}
		}
		lost, err := s.ListSessions(ctx, store.SessionFilter{Validity: checkpointd.ValidityLeaseLost, Limit: 10})
		if err != nil || len(lost) != 1 || lost[0].ID != named.ID {
			t.Errorf("sessions listed as lease_lost: %v (%v), want only %s", lost, err, named.ID)
		}

		// Another checkpoint naming the lost grant stays lease_lost and incomplete.
		cp, err := write(ctx, s, named.ID, withLeases(doc(named.CurrentRun, "implementing"), ln))
		if err != nil || cp.Complete || cp.Validity != checkpointd.ValidityLeaseLost {
			t.Fatalf("checkpoint naming the expired lease: %+v %v; want incomplete and lease_lost", cp, err)
		}
		if diff := cmp.Diff([]string{"lease:" + ln.ID}, cp.Missing); diff != "" {
			t.Errorf("missing (-want +got):\n%s", diff)
		}

		// Re-acquire, and a checkpoint naming the new grant clears lease_lost.
		again := acquire(t, s, named, issueLease(1))
		if again.FencingToken != 2 {
			t.Errorf("re-acquired token %d, want 2", again.FencingToken)
		}
		mark := lastSeq(t, s, named.ID)
		cp, err = write(ctx, s, named.ID, withLeases(doc(named.CurrentRun, "implementing"), again))
		if err != nil || !cp.Complete {
			t.Fatalf("checkpoint naming the new grant: %+v %v; want complete", cp, err)
		}
		if cp.Validity != checkpointd.ValidityUnverified {
			t.Errorf("validity after re-acquire %q, want unverified (no live head observed yet), not valid", cp.Validity)
		}
		if v := getSession(t, s, named.ID).Validity; v != checkpointd.ValidityUnverified {
			t.Errorf("session validity %q, want unverified", v)
		}
		seq := cp.Seq
		if diff := cmp.Diff([]string{"checkpoint.written", fmt.Sprintf("validity.changed lease_lost→unverified checkpoint=%d", seq)},
			leaseLog(t, s, named.ID, mark, names)); diff != "" {
			t.Errorf("log of the clearing checkpoint (-want +got):\n%s", diff)
		}
	})
}

// TestLeaseReapOnAcquire: a grant that expired without the worker noticing
// ends when another session acquires the resource: the old holder's session
// gets the expiry event and, if its checkpoint named the lease, lease_lost.
func TestLeaseReapOnAcquire(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		clock := checkpointd.NewManualClock(t0)
		s := storetest.Open(t, b, clock)
		old, next := newSession(t, s, "owner/name"), newSession(t, s, "owner/name")
		stale := acquire(t, s, old, issueLease(1))
		if _, err := write(ctx, s, old.ID, withLeases(doc(old.CurrentRun, "implementing"), stale)); err != nil {
			t.Fatal(err)
		}
		// Marked before the expiry: a read after it would end the grant
		// itself (lease_expiry.go).
		mark := lastSeq(t, s, old.ID)
		clock.Advance(leaseTTL - time.Microsecond)
		if _, err := s.AcquireLease(ctx, store.NewLease{Resource: issueLease(1), SessionID: next.ID, RunID: next.CurrentRun.ID, TTL: leaseTTL}); !errors.Is(err, checkpointd.ErrLeaseHeld) {
			t.Fatalf("acquire a microsecond before expiry: %v, want ErrLeaseHeld", err)
		}
		clock.Advance(time.Microsecond)
		fresh := acquire(t, s, next, issueLease(1))
		if fresh.FencingToken != 2 {
			t.Errorf("token %d, want 2", fresh.FencingToken)
		}
		names := map[string]string{stale.ID: "stale", fresh.ID: "fresh"}
		if diff := cmp.Diff([]string{"lease.expired stale token=1 cause=expired", "validity.changed unverified→lease_lost stale cause=expired"},
			leaseLog(t, s, old.ID, mark, names)); diff != "" {
			t.Errorf("old holder's log (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"session.created", "run.started", "lease.acquired fresh token=2"}, leaseLog(t, s, next.ID, 0, names)); diff != "" {
			t.Errorf("new holder's log (-want +got):\n%s", diff)
		}
		if n, err := s.ExpireLeases(ctx, 10); err != nil || n != 0 {
			t.Errorf("ExpireLeases after the reap: %d (%v), want 0", n, err)
		}
		// The old holder's checkpoint now names a lease held by another run.
		cp, err := write(ctx, s, old.ID, withLeases(doc(old.CurrentRun, "implementing"), fresh))
		if err != nil || cp.Complete || cp.Validity != checkpointd.ValidityLeaseLost {
			t.Fatalf("checkpoint naming a foreign lease: %+v %v; want incomplete and lease_lost", cp, err)
		}
	})
}

// TestLeaseCompleteness: a checkpoint is complete only when every lease it
// names is held by its run, at the named token, at write time.
func TestLeaseCompleteness(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		clock := checkpointd.NewManualClock(t0)
		s := storetest.Open(t, b, clock)
		a, other := newSession(t, s, "owner/name"), newSession(t, s, "owner/name")
		mine := acquire(t, s, a, issueLease(1))
		short := acquire(t, s, a, issueLease(2))
		released := acquire(t, s, a, issueLease(3))
		if err := s.ReleaseLease(ctx, released.ID, a.CurrentRun.ID, false); err != nil {
			t.Fatal(err)
		}
		theirs := acquire(t, s, other, issueLease(4))
		clock.Advance(leaseTTL / 2)
		if _, err := s.RenewLease(ctx, mine.ID, a.CurrentRun.ID, leaseTTL); err != nil {
			t.Fatal(err)
		}
		clock.Advance(leaseTTL / 2) // short has expired, unreaped

		wrongToken := *mine
		wrongToken.FencingToken = 7
		unknown := &checkpointd.Lease{ID: "lse_00000000000000000000000000000000", FencingToken: 1}
		cases := []struct {
			name    string
			leases  []*checkpointd.Lease
			missing []string
		}{
			{"held at the right token", []*checkpointd.Lease{mine}, []string{}},
			{"named twice", []*checkpointd.Lease{mine, mine}, []string{}},
			{"wrong token", []*checkpointd.Lease{&wrongToken}, []string{"lease:" + mine.ID}},
			{"expired", []*checkpointd.Lease{mine, short}, []string{"lease:" + short.ID}},
			{"released", []*checkpointd.Lease{released}, []string{"lease:" + released.ID}},
			{"another session's", []*checkpointd.Lease{theirs}, []string{"lease:" + theirs.ID}},
			{"unknown", []*checkpointd.Lease{unknown, unknown}, []string{"lease:" + unknown.ID}},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				cp, err := write(ctx, s, a.ID, withLeases(doc(a.CurrentRun, "implementing"), c.leases...))
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(c.missing, cp.Missing); diff != "" {
					t.Errorf("missing (-want +got):\n%s", diff)
				}
				wantValidity := checkpointd.ValidityUnverified
				if len(c.missing) > 0 {
					wantValidity = checkpointd.ValidityLeaseLost
				}
				if cp.Complete != (len(c.missing) == 0) || cp.Validity != wantValidity {
					t.Errorf("complete %v validity %s, want %v %s", cp.Complete, cp.Validity, len(c.missing) == 0, wantValidity)
				}
				stored, err := s.GetCheckpoint(ctx, a.ID, cp.Seq)
				if err != nil || stored.Complete != cp.Complete || !cmp.Equal(stored.Missing, cp.Missing) {
					t.Errorf("stored checkpoint complete %v missing %v (%v), want what the write returned", stored.Complete, stored.Missing, err)
				}
			})
		}
	})
}

// TestListLeases: filters by repo (any case), resource, kind, session and
// state, within a scope, newest first, in pages.
func TestListLeases(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		clock := checkpointd.NewManualClock(t0)
		s := storetest.Open(t, b, clock)
		a, c := newSession(t, s, "acme/widgets"), newSession(t, s, "acme/widgets")
		o := newSession(t, s, "other/thing")
		res := func(kind checkpointd.ResourceKind, repo string, n int64, branch string) checkpointd.Resource {
			return checkpointd.Resource{Kind: kind, Repo: repo, Number: n, Branch: branch}
		}
		names := map[string]string{}
		grant := func(name string, sess *checkpointd.Session, r checkpointd.Resource) *checkpointd.Lease {
			l := acquire(t, s, sess, r)
			names[l.ID] = name
			return l
		}
		i1 := grant("i1", a, res(checkpointd.ResourceIssue, "acme/widgets", 1, ""))
		grant("p1", a, res(checkpointd.ResourcePR, "Acme/Widgets", 1, ""))
		grant("b1", c, res(checkpointd.ResourceBranch, "acme/widgets", 0, "fix-1"))
		grant("o1", o, res(checkpointd.ResourceIssue, "other/thing", 1, ""))
		if err := s.ReleaseLease(ctx, i1.ID, a.CurrentRun.ID, false); err != nil {
			t.Fatal(err)
		}
		grant("i1b", c, res(checkpointd.ResourceIssue, "ACME/widgets", 1, ""))

		list := func(f store.LeaseFilter) []string {
			t.Helper()
			if f.Limit == 0 {
				f.Limit = 50
			}
			ls, err := s.ListLeases(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			out := []string{}
			for _, l := range ls {
				out = append(out, names[l.ID])
			}
			return out
		}
		cases := []struct {
			name string
			f    store.LeaseFilter
			want []string
		}{
			{"all, newest first", store.LeaseFilter{}, []string{"i1b", "o1", "b1", "p1", "i1"}},
			{"repo in another case", store.LeaseFilter{Repo: "ACME/Widgets"}, []string{"i1b", "b1", "p1", "i1"}},
			{"one resource, every grant", store.LeaseFilter{Resource: ptr(res(checkpointd.ResourceIssue, "Acme/widgets", 1, ""))}, []string{"i1b", "i1"}},
			{"a branch resource", store.LeaseFilter{Resource: ptr(res(checkpointd.ResourceBranch, "acme/widgets", 0, "fix-1"))}, []string{"b1"}},
			{"branch names are exact", store.LeaseFilter{Resource: ptr(res(checkpointd.ResourceBranch, "acme/widgets", 0, "FIX-1"))}, []string{}},
			{"kind", store.LeaseFilter{Kind: checkpointd.ResourcePR}, []string{"p1"}},
			{"session", store.LeaseFilter{SessionID: a.ID}, []string{"p1", "i1"}},
			{"state held", store.LeaseFilter{State: checkpointd.LeaseHeld}, []string{"i1b", "o1", "b1", "p1"}},
			{"state released", store.LeaseFilter{State: checkpointd.LeaseReleased}, []string{"i1"}},
			{"session and state", store.LeaseFilter{SessionID: a.ID, State: checkpointd.LeaseHeld}, []string{"p1"}},
			{"scope owner/*", store.LeaseFilter{Scope: []string{"ACME/*"}}, []string{"i1b", "b1", "p1", "i1"}},
			{"scope one repo", store.LeaseFilter{Scope: []string{"other/thing"}}, []string{"o1"}},
			{"empty scope", store.LeaseFilter{Scope: []string{}}, []string{}},
			{"repo outside the scope", store.LeaseFilter{Repo: "other/thing", Scope: []string{"acme/*"}}, []string{}},
			{"unknown session", store.LeaseFilter{SessionID: "ses_00000000000000000000000000000000"}, []string{}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				if diff := cmp.Diff(tc.want, list(tc.f)); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			})
		}

		// Pages of two walk the whole list once.
		var paged []string
		before := ""
		for range 10 {
			ls, err := s.ListLeases(ctx, store.LeaseFilter{Limit: 2, Before: before})
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range ls {
				paged = append(paged, names[l.ID])
			}
			if len(ls) < 2 {
				break
			}
			before = ls[len(ls)-1].ID
		}
		if diff := cmp.Diff([]string{"i1b", "o1", "b1", "p1", "i1"}, paged); diff != "" {
			t.Errorf("paged (-want +got):\n%s", diff)
		}
	})
}

// TestLeaseExpiryRecordedOnce: expiry workers on several replicas and
// acquirers reaping the same expired grants record each expiry exactly once
// and leave every resource with exactly one holder.
func TestLeaseExpiryRecordedOnce(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		clock := checkpointd.NewManualClock(t0)
		url := storetest.URL(t, b)
		s := storetest.OpenURL(t, url, clock)
		replicas := []*store.Store{s, storetest.OpenURL(t, url, clock), storetest.OpenURL(t, url, clock)}
		const n = 12
		holders := make([]*checkpointd.Session, n)
		for i := range holders {
			holders[i] = newSession(t, s, "owner/name")
			acquire(t, s, holders[i], issueLease(int64(i+1)))
		}
		takers := make([]*checkpointd.Session, n)
		for i := range takers {
			takers[i] = newSession(t, s, "owner/name")
		}
		clock.Advance(leaseTTL)

		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, r := range replicas {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if _, err := r.ExpireLeases(ctx, 100); err != nil {
					t.Errorf("ExpireLeases: %v", err)
				}
			}()
		}
		for i, tk := range takers {
			r := replicas[i%len(replicas)]
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if _, err := r.AcquireLease(ctx, store.NewLease{Resource: issueLease(int64(i + 1)), SessionID: tk.ID, RunID: tk.CurrentRun.ID, TTL: leaseTTL}); err != nil {
					t.Errorf("acquire of an expired resource: %v", err)
				}
			}()
		}
		close(start)
		wg.Wait()

		for i, h := range holders {
			var expired []string
			for _, line := range leaseLog(t, s, h.ID, 0, nil) {
				if strings.HasPrefix(line, checkpointd.EventLeaseExpired) {
					expired = append(expired, line)
				}
			}
			if len(expired) != 1 {
				t.Errorf("grant %d: %d expiry events, want 1: %v", i+1, len(expired), expired)
			}
			held, err := s.ListLeases(ctx, store.LeaseFilter{Resource: ptr(issueLease(int64(i + 1))), State: checkpointd.LeaseHeld, Limit: 10})
			if err != nil || len(held) != 1 || held[0].Holder.SessionID != takers[i].ID {
				t.Errorf("resource %d: held grants %+v (%v), want one, the taker's", i+1, held, err)
			}
		}
	})
}

// TestLeaseRenewalRacesExpiry: a renewal the store acknowledged is never
// undone by an expiry that raced it. Two replicas share one database; their
// clocks stand a millisecond on either side of each trial's deadline, so a
// renewal the early one accepts just before the deadline races the expiry
// worker and a reaping acquirer on the late one just after it. Whenever the
// renewal succeeded, the lease must still be held by its holder and no one
// else may hold the resource; exactly one of the two must succeed.
func TestLeaseRenewalRacesExpiry(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		url := storetest.URL(t, b)
		earlyClock := checkpointd.NewManualClock(t0.Add(-time.Millisecond))
		lateClock := checkpointd.NewManualClock(t0.Add(time.Millisecond))
		early, late := storetest.OpenURL(t, url, earlyClock), storetest.OpenURL(t, url, lateClock)
		const trials = 40
		var violations []string
		for i := range trials {
			// The grant expires at the deadline, between the two clocks.
			holder, taker := newSession(t, early, "owner/name"), newSession(t, early, "owner/name")
			res := issueLease(int64(i + 1))
			l, err := early.AcquireLease(ctx, store.NewLease{Resource: res, SessionID: holder.ID, RunID: holder.CurrentRun.ID, TTL: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			start := make(chan struct{})
			var renewErr, takeErr error
			wg.Add(3)
			go func() {
				defer wg.Done()
				<-start
				_, renewErr = early.RenewLease(ctx, l.ID, holder.CurrentRun.ID, leaseTTL)
			}()
			go func() {
				defer wg.Done()
				<-start
				if _, err := late.ExpireLeases(ctx, 100); err != nil {
					t.Errorf("ExpireLeases: %v", err)
				}
			}()
			go func() {
				defer wg.Done()
				<-start
				_, takeErr = late.AcquireLease(ctx, store.NewLease{Resource: res, SessionID: taker.ID, RunID: taker.CurrentRun.ID, TTL: leaseTTL})
			}()
			close(start)
			wg.Wait()
			if renewErr != nil && !errors.Is(renewErr, checkpointd.ErrLeaseLost) {
				t.Fatalf("renew: %v", renewErr)
			}
			if takeErr != nil && !errors.Is(takeErr, checkpointd.ErrLeaseHeld) {
				t.Fatalf("acquire: %v", takeErr)
			}
			got := getLease(t, early, l.ID)
			switch {
			case renewErr == nil && takeErr == nil:
				violations = append(violations, fmt.Sprintf("trial %d: the renewal succeeded and another session acquired the resource too (renewed lease now %s)", i, got.State))
			case renewErr == nil && got.State != checkpointd.LeaseHeld:
				violations = append(violations, fmt.Sprintf("trial %d: the renewal succeeded but the lease is %s", i, got.State))
			case renewErr != nil && takeErr != nil:
				violations = append(violations, fmt.Sprintf("trial %d: neither the renewal nor the acquire succeeded", i))
			}
			// The next trial's deadline lies a second later: before the
			// renewed and the taken grants expire, after this one's.
			earlyClock.Advance(time.Second)
			lateClock.Advance(time.Second)
		}
		for _, v := range violations {
			t.Error(v)
		}
		if len(violations) > 0 {
			t.Logf("%d of %d trials broke the lease", len(violations), trials)
		}
	})
}

// TestLeaseReapOwnGrant: a session re-acquiring its own expired, unreaped
// grant logs the old grant's end before the new grant: the audit log reads
// in the order things happened.
func TestLeaseReapOwnGrant(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		clock := checkpointd.NewManualClock(t0)
		s := storetest.Open(t, b, clock)
		a := newSession(t, s, "owner/name")
		old := acquire(t, s, a, issueLease(1))
		if _, err := write(ctx, s, a.ID, withLeases(doc(a.CurrentRun, "implementing"), old)); err != nil {
			t.Fatal(err)
		}
		mark := lastSeq(t, s, a.ID) // before the expiry, which a read would act on
		clock.Advance(leaseTTL)
		fresh := acquire(t, s, a, issueLease(1))
		want := []string{"lease.expired old token=1 cause=expired", "validity.changed unverified→lease_lost old cause=expired",
			"lease.acquired fresh token=2"}
		if diff := cmp.Diff(want, leaseLog(t, s, a.ID, mark, map[string]string{old.ID: "old", fresh.ID: "fresh"})); diff != "" {
			t.Errorf("log (-want +got):\n%s", diff)
		}
	})
}
