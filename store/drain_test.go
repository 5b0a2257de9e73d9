package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/migrations"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

const (
	headA = "0123456789abcdef0123456789abcdef01234567"
	headB = "89abcdef0123456789abcdef0123456789abcdef"
)

// drainSession creates an active session of role on repo and branch.
func drainSession(t *testing.T, s *store.Store, repo, role, branch string) *checkpointd.Session {
	t.Helper()
	sess, err := s.CreateSession(t.Context(), store.NewSession{Repo: repo, Role: role, Issue: 1, Branch: branch,
		Agent: checkpointd.Agent{Runtime: "claude-code"}})
	if err != nil {
		t.Fatalf("CreateSession %s %s: %v", repo, role, err)
	}
	return sess
}

// drainDoc is a complete checkpoint of sess at head.
func drainDoc(sess *checkpointd.Session, head string) *checkpointd.Document {
	return &checkpointd.Document{
		SchemaVersion: 1, RunID: sess.CurrentRun.ID, FencingToken: sess.CurrentRun.FencingToken, Role: sess.Role, Stage: "implementing",
		Identity:   &checkpointd.Identity{Runtime: "claude-code"},
		Target:     &checkpointd.Target{Repo: sess.Repo, Issue: 1},
		Workspace:  &checkpointd.Workspace{Branch: sess.Branch, Head: head},
		NextAction: &checkpointd.NextAction{Action: "run the tests"},
		Recovery:   &checkpointd.Recovery{Instructions: "git fetch && git checkout " + sess.Branch},
	}
}

func mustWrite(t *testing.T, s *store.Store, sess *checkpointd.Session, d *checkpointd.Document) *checkpointd.Checkpoint {
	t.Helper()
	cp, err := write(t.Context(), s, sess.ID, d)
	if err != nil {
		t.Fatalf("WriteCheckpoint %s: %v", sess.ID, err)
	}
	return cp
}

// push observes the live head of a session's branch, as a webhook would.
func push(t *testing.T, s *store.Store, sess *checkpointd.Session, head string) {
	t.Helper()
	if _, err := s.Observe(t.Context(), []checkpointd.Observation{{Repo: sess.Repo, Branch: sess.Branch, Head: head,
		Authoritative: true, Source: "test"}}); err != nil {
		t.Fatalf("Observe: %v", err)
	}
}

func drainStatus(t *testing.T, s *store.Store, q store.DrainQuery) *store.DrainStatus {
	t.Helper()
	if q.Limit == 0 {
		q.Limit = 500
	}
	st, err := s.DrainStatus(t.Context(), q)
	if err != nil {
		t.Fatalf("DrainStatus: %v", err)
	}
	return st
}

// reasonsOf maps each blocking session's name to its reasons.
func reasonsOf(bs []checkpointd.DrainBlocker, names map[string]string) map[string][]checkpointd.BlockReason {
	out := map[string][]checkpointd.BlockReason{}
	for _, b := range bs {
		out[names[b.SessionID]] = b.Reasons
	}
	return out
}

func startDrain(t *testing.T, s *store.Store) *checkpointd.Drain {
	t.Helper()
	d, started, err := s.StartDrain(t.Context(), "deploy v2", "tok_test")
	if err != nil || !started {
		t.Fatalf("StartDrain: %v started=%v", err, started)
	}
	return d
}

// eventsOf returns the events of kind in a session's log.
func eventsOf(t *testing.T, s *store.Store, id, kind string) []checkpointd.Event {
	t.Helper()
	evs, err := s.ListEvents(t.Context(), id, 0, 500)
	if err != nil {
		t.Fatalf("ListEvents: %v", err)
	}
	var out []checkpointd.Event
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("session %s: event %d has seq %d: the log has a gap", id, i, e.Seq)
		}
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// TestDrainGate drives every blocking reason through the store: what blocks
// is exactly what the row says, relative to the drain's start; a blocked
// decision is recorded once per drain in each blocking session's log; a
// completion in every active session's log, with the checkpoint it vouches
// for; ended sessions never block.
func TestDrainGate(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		clock := checkpointd.NewManualClock(t0)
		s := storetest.Open(t, b, clock)
		names := map[string]string{}
		mk := func(name, repo, role, branch string) *checkpointd.Session {
			sess := drainSession(t, s, repo, role, branch)
			names[sess.ID] = name
			return sess
		}
		ready := mk("ready", "acme/widgets", "author", "fix-1")
		old := mk("old", "acme/widgets", "reviewer", "fix-2")
		none := mk("none", "acme/gadgets", "author", "fix-3")
		incomplete := mk("incomplete", "acme/gadgets", "reviewer", "fix-4")
		stale := mk("stale", "other/x", "author", "fix-5")
		leaseLost := mk("lease_lost", "other/x", "reviewer", "fix-6")
		invalidated := mk("invalidated", "other/y", "author", "fix-7")
		unverified := mk("unverified", "other/y", "reviewer", "fix-8")
		ended := mk("ended", "other/z", "author", "fix-9")
		for _, sess := range []*checkpointd.Session{ready, old, incomplete, stale, leaseLost, invalidated, ended} {
			push(t, s, sess, headA)
		}
		mustWrite(t, s, old, drainDoc(old, headA))
		lease := acquire(t, s, leaseLost, checkpointd.Resource{Kind: checkpointd.ResourceBranch, Repo: leaseLost.Repo, Branch: leaseLost.Branch})

		clock.Advance(time.Second)
		d := startDrain(t, s)
		if !d.Gating || d.State != checkpointd.DrainRunning || !d.StartedAt.Equal(clock.Now()) {
			t.Fatalf("started drain %+v", d)
		}
		clock.Advance(time.Second)
		mustWrite(t, s, ready, drainDoc(ready, headA))
		inc := drainDoc(incomplete, headA)
		inc.NextAction, inc.Recovery = nil, nil
		mustWrite(t, s, incomplete, inc)
		mustWrite(t, s, stale, drainDoc(stale, headA))
		push(t, s, stale, headB)
		mustWrite(t, s, leaseLost, withLeases(drainDoc(leaseLost, headA), lease))
		if err := s.ReleaseLease(ctx, lease.ID, leaseLost.CurrentRun.ID, false); err != nil {
			t.Fatal(err)
		}
		mustWrite(t, s, invalidated, drainDoc(invalidated, headA))
		if _, err := s.Observe(ctx, []checkpointd.Observation{{Repo: invalidated.Repo, Branch: invalidated.Branch,
			End: checkpointd.RefDeleted, Authoritative: true, Source: "test"}}); err != nil {
			t.Fatal(err)
		}
		mustWrite(t, s, unverified, drainDoc(unverified, headA))
		if _, err := s.EndSession(ctx, ended.ID, ended.CurrentRun.ID, checkpointd.OutcomeAbandoned); err != nil {
			t.Fatal(err)
		}

		st := drainStatus(t, s, store.DrainQuery{})
		want := map[string][]checkpointd.BlockReason{
			"old":         {checkpointd.BlockNoCheckpoint},
			"none":        {checkpointd.BlockNoCheckpoint, checkpointd.BlockUnverified},
			"incomplete":  {checkpointd.BlockIncomplete},
			"stale":       {checkpointd.BlockStale},
			"lease_lost":  {checkpointd.BlockLeaseLost},
			"invalidated": {checkpointd.BlockInvalidated},
			"unverified":  {checkpointd.BlockUnverified},
		}
		if diff := cmp.Diff(want, reasonsOf(st.Blocking, names)); diff != "" {
			t.Errorf("blocking reasons (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(&checkpointd.DrainCounts{Active: 8, Ready: 1, Blocking: 7}, st.Counts); diff != "" {
			t.Errorf("counts (-want +got):\n%s", diff)
		}
		if !slices.IsSortedFunc(st.Blocking, func(a, b checkpointd.DrainBlocker) int { return cmpString(a.SessionID, b.SessionID) }) {
			t.Errorf("blocking list not by session id")
		}
		for _, bl := range st.Blocking {
			switch names[bl.SessionID] {
			case "incomplete":
				if diff := cmp.Diff([]string{"next_action", "recovery.instructions"}, bl.Missing); diff != "" {
					t.Errorf("missing (-want +got):\n%s", diff)
				}
			case "none":
				if bl.CheckpointAt != nil {
					t.Errorf("session without checkpoint has checkpoint_at %v", bl.CheckpointAt)
				}
			case "stale":
				if bl.ValidityReason == "" || bl.Repo != "other/x" || bl.Role != "author" {
					t.Errorf("stale blocker %+v", bl)
				}
			}
		}
		if ids, err := s.DrainUnverified(ctx, 100); err != nil || !slices.Equal(ids, []string{unverified.ID}) {
			t.Errorf("DrainUnverified = %v, %v; want only the session blocked by nothing else", ids, err)
		}

		// Pages by id cover the list exactly once; a scope filters the list,
		// not the counts.
		var paged []string
		for after := ""; ; {
			page := drainStatus(t, s, store.DrainQuery{Limit: 3, After: after})
			for _, bl := range page.Blocking {
				paged = append(paged, bl.SessionID)
			}
			if len(page.Blocking) < 3 {
				break
			}
			after = page.Blocking[2].SessionID
		}
		if len(paged) != 7 || !slices.IsSorted(paged) {
			t.Errorf("paged blocking list %v", paged)
		}
		scoped := drainStatus(t, s, store.DrainQuery{Scope: []string{"ACME/*"}})
		if diff := cmp.Diff(map[string][]checkpointd.BlockReason{"old": want["old"], "none": want["none"], "incomplete": want["incomplete"]},
			reasonsOf(scoped.Blocking, names)); diff != "" || scoped.Counts.Blocking != 7 {
			t.Errorf("scoped list (-want +got):\n%s counts %+v", diff, scoped.Counts)
		}

		// A blocked decision: stored on the drain; NoteDrainBlocked, which
		// the gate runs after answering, records it in every active
		// session's log with the session's part in it: its reasons, or
		// ready.
		clock.Advance(time.Second)
		dec := complete(t, s, 2)
		if dec.Decision.Outcome != checkpointd.DrainOutcomeBlocked || dec.State != checkpointd.DrainRunning ||
			dec.Decision.Counts != (checkpointd.DrainCounts{Active: 8, Ready: 1, Blocking: 7}) || len(dec.Decision.Blocking) != 2 {
			t.Fatalf("decision %+v", dec.Decision)
		}
		for id, name := range names {
			if n := len(eventsOf(t, s, id, checkpointd.EventDrainBlocked)); n != 0 {
				t.Errorf("%s: the decision itself wrote %d drain.blocked events; it must not wait on them", name, n)
			}
		}
		if n, err := s.NoteDrainBlocked(ctx, "drn_other"); err != nil || n != 0 {
			t.Errorf("NoteDrainBlocked of another drain = %d, %v; want nothing noted", n, err)
		}
		if n, err := s.NoteDrainBlocked(ctx, d.ID); err != nil || n != 8 {
			t.Fatalf("NoteDrainBlocked = %d, %v; want the 8 active sessions", n, err)
		}
		type noted struct {
			DrainID string                    `json:"drain_id"`
			Outcome string                    `json:"outcome"`
			Ready   bool                      `json:"ready"`
			Reasons []checkpointd.BlockReason `json:"reasons"`
			Missing []string                  `json:"missing"`
		}
		notes := func(id string) []noted {
			var out []noted
			for _, e := range eventsOf(t, s, id, checkpointd.EventDrainBlocked) {
				var n noted
				if err := json.Unmarshal(e.Data, &n); err != nil {
					t.Fatal(err)
				}
				out = append(out, n)
			}
			return out
		}
		for id, name := range names {
			evs := notes(id)
			switch {
			case name == "ended":
				if len(evs) != 0 {
					t.Errorf("ended: %d drain.blocked events; an ended session is not concerned", len(evs))
				}
			case len(evs) != 1:
				t.Errorf("%s: %d drain.blocked events, want 1", name, len(evs))
			case evs[0].DrainID != d.ID || evs[0].Outcome != "blocked":
				t.Errorf("%s: drain.blocked %+v", name, evs[0])
			case name == "ready":
				if !evs[0].Ready || len(evs[0].Reasons) != 0 {
					t.Errorf("ready: noted %+v, want ready without reasons", evs[0])
				}
			default:
				if evs[0].Ready || !slices.Equal(evs[0].Reasons, want[name]) {
					t.Errorf("%s: noted %+v, want reasons %v", name, evs[0], want[name])
				}
				if name == "incomplete" && len(evs[0].Missing) != 2 {
					t.Errorf("incomplete: event without the missing rules: %+v", evs[0])
				}
			}
		}
		// A repeated decision: nothing changed, nothing is noted again.
		clock.Advance(time.Second)
		complete(t, s, 2)
		if n, err := s.NoteDrainBlocked(ctx, d.ID); err != nil || n != 0 {
			t.Errorf("a repeated decision noted %d sessions again (%v)", n, err)
		}
		if n := len(notes(stale.ID)); n != 1 {
			t.Errorf("a repeated decision recorded again: %d drain.blocked events", n)
		}
		// The stale session catches up: the next decision tells it it is
		// ready now, and only it.
		clock.Advance(time.Second)
		mustWrite(t, s, stale, drainDoc(stale, headB))
		complete(t, s, 2)
		if n, err := s.NoteDrainBlocked(ctx, d.ID); err != nil || n != 1 {
			t.Errorf("after the stale session caught up: noted %d, %v; want 1", n, err)
		}
		if got := notes(stale.ID); len(got) != 2 || !got[1].Ready {
			t.Errorf("the caught-up session's notes %+v, want a second one saying ready", got)
		}

		// Everyone fixes their state (or ends): the drain completes.
		clock.Advance(time.Second)
		mustWrite(t, s, old, drainDoc(old, headA))
		push(t, s, none, headA)
		mustWrite(t, s, none, drainDoc(none, headA))
		mustWrite(t, s, incomplete, drainDoc(incomplete, headA))
		mustWrite(t, s, stale, drainDoc(stale, headB))
		mustWrite(t, s, leaseLost, drainDoc(leaseLost, headA))
		if _, err := s.EndSession(ctx, invalidated.ID, invalidated.CurrentRun.ID, checkpointd.OutcomeCompleted); err != nil {
			t.Fatal(err)
		}
		if st := drainStatus(t, s, store.DrainQuery{}); st.Counts.Blocking != 1 || st.Blocking[0].SessionID != unverified.ID {
			t.Fatalf("after the fixes: %+v %+v", st.Counts, st.Blocking)
		}
		push(t, s, unverified, headA)
		clock.Advance(time.Second)
		dec = complete(t, s, 50)
		if dec.Decision.Outcome != checkpointd.DrainOutcomeCompleted || dec.State != checkpointd.DrainCompleted || !dec.Gating ||
			dec.EndedAt == nil || dec.Decision.Counts != (checkpointd.DrainCounts{Active: 7, Ready: 7}) {
			t.Fatalf("completion %+v decision %+v", dec, dec.Decision)
		}
		// The logs are told after the decision, of the checkpoint it
		// vouched for: not of one written since.
		vouched := map[string]int64{}
		for id := range names {
			if l := getSession(t, s, id).Latest; l != nil {
				vouched[id] = l.Seq
			}
		}
		mustWrite(t, s, ready, drainDoc(ready, headA))
		if evs := eventsOf(t, s, ready.ID, checkpointd.EventDrainCompleted); len(evs) != 0 {
			t.Errorf("drain.completed %v before the notes ran", evs)
		}
		if n, err := s.NoteDrainCompleted(ctx); err != nil || n != 7 {
			t.Fatalf("NoteDrainCompleted: %d, %v; want 7", n, err)
		}
		if n, err := s.NoteDrainCompleted(ctx); err != nil || n != 0 {
			t.Fatalf("NoteDrainCompleted again: %d, %v; want nothing left", n, err)
		}
		for id, name := range names {
			evs := eventsOf(t, s, id, checkpointd.EventDrainCompleted)
			if name == "ended" || name == "invalidated" {
				if len(evs) != 0 {
					t.Errorf("%s: an ended session got drain.completed", name)
				}
				continue
			}
			var data struct {
				DrainID       string `json:"drain_id"`
				CheckpointSeq int64  `json:"checkpoint_seq"`
			}
			if len(evs) == 1 {
				_ = json.Unmarshal(evs[0].Data, &data)
			}
			if len(evs) != 1 || data.DrainID != d.ID || data.CheckpointSeq != vouched[id] || !evs[0].At.Equal(*dec.EndedAt) {
				t.Errorf("%s: drain.completed events %v, want one naming checkpoint %d at %v", name, evs, vouched[id], dec.EndedAt)
			}
		}
		// A completed drain keeps gating until lifted; asking again answers it.
		if again := complete(t, s, 50); again.ID != d.ID || again.State != checkpointd.DrainCompleted {
			t.Errorf("complete on a completed drain: %+v", again)
		}
		if _, err := s.CreateSession(ctx, store.NewSession{Repo: "acme/widgets", Role: "author"}); !errors.Is(err, checkpointd.ErrDraining) {
			t.Errorf("CreateSession after completion: %v, want ErrDraining until lifted", err)
		}
		if lifted, err := s.LiftCompletedDrain(ctx); err != nil || lifted == nil || lifted.ID != d.ID || lifted.Gating || lifted.LiftedAt == nil {
			t.Fatalf("LiftCompletedDrain: %+v, %v", lifted, err)
		}
		drainSession(t, s, "acme/widgets", "author", "after")
	})
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func complete(t *testing.T, s *store.Store, limit int) *checkpointd.Drain {
	t.Helper()
	d, err := s.CompleteDrain(t.Context(), store.DrainCompletion{By: "tok_test", Limit: limit})
	if err != nil {
		t.Fatalf("CompleteDrain: %v", err)
	}
	if d.Decision == nil {
		t.Fatalf("CompleteDrain: no decision on %+v", d)
	}
	return d
}

// TestDrainLifecycle: one running drain at a time, even when started
// concurrently; new sessions and runs refused while it gates (checked in
// the store, so every replica agrees); cancel admits them again; the drain
// survives a restart of the store.
func TestDrainLifecycle(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		url := storetest.URL(t, b)
		s := storetest.OpenURL(t, url, checkpointd.SystemClock{})
		sess := drainSession(t, s, "acme/widgets", "author", "fix-1")
		if _, err := s.CancelDrain(ctx, "tok"); !errors.Is(err, checkpointd.ErrNotFound) {
			t.Errorf("CancelDrain without a drain: %v, want ErrNotFound", err)
		}
		if _, err := s.CompleteDrain(ctx, store.DrainCompletion{By: "tok", Limit: 10}); !errors.Is(err, checkpointd.ErrNotFound) {
			t.Errorf("CompleteDrain without a drain: %v, want ErrNotFound", err)
		}
		if st := drainStatus(t, s, store.DrainQuery{}); st.Drain != nil || st.Counts != nil {
			t.Errorf("status before any drain: %+v", st)
		}

		const n = 8
		var wg sync.WaitGroup
		var mu sync.Mutex
		ids := map[string]int{}
		startedCount := 0
		for range n {
			wg.Go(func() {
				d, started, err := s.StartDrain(ctx, "race", "tok")
				if err != nil {
					t.Errorf("StartDrain: %v", err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				ids[d.ID]++
				if started {
					startedCount++
				}
			})
		}
		wg.Wait()
		if startedCount != 1 || len(ids) != 1 {
			t.Fatalf("%d concurrent starts: %d started, drains %v; want exactly one", n, startedCount, ids)
		}
		if g, err := s.DrainGating(ctx); err != nil || !g {
			t.Errorf("DrainGating = %v, %v", g, err)
		}
		if _, err := s.CreateSession(ctx, store.NewSession{Repo: "acme/widgets", Role: "author"}); !errors.Is(err, checkpointd.ErrDraining) {
			t.Errorf("CreateSession while draining: %v", err)
		}
		if _, err := s.StartRun(ctx, sess.ID, store.NewRun{Takeover: true, Reason: "x"}); !errors.Is(err, checkpointd.ErrDraining) {
			t.Errorf("StartRun while draining: %v", err)
		}
		// Writes continue.
		mustWrite(t, s, sess, drainDoc(sess, headA))

		// A restart keeps the drain.
		s2 := storetest.OpenURL(t, url, checkpointd.SystemClock{})
		st := drainStatus(t, s2, store.DrainQuery{})
		if st.Drain == nil || st.Drain.State != checkpointd.DrainRunning || !st.Drain.Gating || st.Counts.Active != 1 {
			t.Fatalf("after reopening: %+v", st)
		}
		if lifted, err := s2.LiftCompletedDrain(ctx); err != nil || lifted != nil {
			t.Errorf("LiftCompletedDrain lifted a running drain: %+v %v", lifted, err)
		}

		c, err := s2.CancelDrain(ctx, "tok_op")
		if err != nil || c.State != checkpointd.DrainCancelled || c.Gating || c.EndedBy != "tok_op" || c.EndedAt == nil {
			t.Fatalf("CancelDrain: %+v, %v", c, err)
		}
		if g, _ := s.DrainGating(ctx); g {
			t.Error("still gating after cancel")
		}
		if _, err := s.StartRun(ctx, sess.ID, store.NewRun{Takeover: true, Reason: "x"}); err != nil {
			t.Errorf("StartRun after cancel: %v", err)
		}
		fix2 := drainSession(t, s, "acme/widgets", "author", "fix-2")
		if st := drainStatus(t, s, store.DrainQuery{}); st.Drain == nil || st.Drain.ID != c.ID || st.Counts != nil {
			t.Errorf("status after cancel shows %+v, want the cancelled drain without counts", st)
		}

		// A new drain replaces a completed one that still gates.
		for _, ss := range []string{sess.ID, fix2.ID} {
			cur := getSession(t, s, ss)
			if _, err := s.EndSession(ctx, ss, cur.CurrentRun.ID, checkpointd.OutcomeCompleted); err != nil {
				t.Fatal(err)
			}
		}
		d1 := startDrain(t, s)
		if dec := complete(t, s, 10); dec.State != checkpointd.DrainCompleted || dec.ID != d1.ID {
			t.Fatalf("completing with no active session: %+v", dec)
		}
		d2 := startDrain(t, s)
		if d2.ID == d1.ID {
			t.Fatal("the completed drain was reused")
		}
		if st := drainStatus(t, s, store.DrainQuery{}); st.Drain.ID != d2.ID || st.Drain.State != checkpointd.DrainRunning {
			t.Errorf("open drain after replacing a completed one: %+v", st.Drain)
		}
	})
}

// TestDrainFailsClosed: when the store cannot be read, the gate answers
// ErrStoreUnavailable and decides nothing; a session whose stored state
// makes no sense blocks with unknown.
func TestDrainFailsClosed(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		url := storetest.URL(t, b)
		s := storetest.OpenURL(t, url, checkpointd.SystemClock{})
		sess := drainSession(t, s, "acme/widgets", "author", "fix-1")
		odd := drainSession(t, s, "acme/widgets", "reviewer", "fix-2")
		d := startDrain(t, s)
		push(t, s, sess, headA)
		mustWrite(t, s, sess, drainDoc(sess, headA))
		push(t, s, odd, headA)
		mustWrite(t, s, odd, drainDoc(odd, headA))

		db := openRaw(t, b, url)
		if _, err := db.ExecContext(ctx, `UPDATE sessions SET validity = 'bogus' WHERE id = $1`, odd.ID); err != nil {
			t.Fatal(err)
		}
		st := drainStatus(t, s, store.DrainQuery{})
		if len(st.Blocking) != 1 || !slices.Equal(st.Blocking[0].Reasons, []checkpointd.BlockReason{checkpointd.BlockUnknown}) {
			t.Fatalf("a session with an unknown validity: %+v", st.Blocking)
		}
		if _, err := db.ExecContext(ctx, `UPDATE sessions SET validity = 'valid', drain_ready = FALSE, latest_complete = FALSE, latest_missing = 'not json' WHERE id = $1`, odd.ID); err != nil {
			t.Fatal(err)
		}
		st = drainStatus(t, s, store.DrainQuery{})
		if len(st.Blocking) != 1 || !slices.Contains(st.Blocking[0].Reasons, checkpointd.BlockUnknown) {
			t.Fatalf("a session with unreadable missing rules: %+v", st.Blocking)
		}
		if dec := complete(t, s, 10); dec.Decision.Outcome != checkpointd.DrainOutcomeBlocked {
			t.Fatalf("decision over an unknown session: %+v", dec.Decision)
		}
		if _, err := db.ExecContext(ctx, `UPDATE drains SET decision = '{not json' WHERE id = $1`, d.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := s.DrainStatus(ctx, store.DrainQuery{Limit: 10}); !errors.Is(err, checkpointd.ErrStoreUnavailable) {
			t.Errorf("DrainStatus with an unreadable decision: %v, want ErrStoreUnavailable", err)
		}
		if _, err := db.ExecContext(ctx, `UPDATE drains SET decision = '' WHERE id = $1`, d.ID); err != nil {
			t.Fatal(err)
		}

		// The database goes away: every read and decision fails closed.
		if _, err := db.ExecContext(ctx, `UPDATE sessions SET latest_complete = TRUE, latest_missing = '[]', drain_ready = TRUE WHERE id = $1`, odd.ID); err != nil {
			t.Fatal(err)
		}
		s.Close()
		if _, err := s.CompleteDrain(ctx, store.DrainCompletion{By: "tok", Limit: 10}); !errors.Is(err, checkpointd.ErrStoreUnavailable) {
			t.Errorf("CompleteDrain on a closed store: %v", err)
		}
		if _, err := s.DrainStatus(ctx, store.DrainQuery{Limit: 10}); !errors.Is(err, checkpointd.ErrStoreUnavailable) {
			t.Errorf("DrainStatus on a closed store: %v", err)
		}
		if _, err := s.DrainUnverified(ctx, 10); !errors.Is(err, checkpointd.ErrStoreUnavailable) {
			t.Errorf("DrainUnverified on a closed store: %v", err)
		}
		if _, err := s.DrainGating(ctx); !errors.Is(err, checkpointd.ErrStoreUnavailable) {
			t.Errorf("DrainGating on a closed store: %v", err)
		}
		s2 := storetest.OpenURL(t, url, checkpointd.SystemClock{})
		if st := drainStatus(t, s2, store.DrainQuery{}); st.Drain.State != checkpointd.DrainRunning || st.Counts.Blocking != 0 {
			t.Fatalf("after the failed decision: %+v %+v", st.Drain, st.Counts)
		}
		if dec := complete(t, s2, 10); dec.Decision.Outcome != checkpointd.DrainOutcomeCompleted {
			t.Fatalf("decision once the store is back: %+v", dec.Decision)
		}
	})
}

// TestRecordWriteFailure: a failed write by the current run during a
// running drain is recorded with its event and blocks with write_failed
// until the next successful write; outside a drain, for another run or an
// ended session nothing is recorded.
func TestRecordWriteFailure(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		clock := checkpointd.NewManualClock(t0)
		s := storetest.Open(t, b, clock)
		sess := drainSession(t, s, "acme/widgets", "author", "fix-1")
		push(t, s, sess, headA)
		other := drainSession(t, s, "acme/widgets", "reviewer", "fix-2")
		push(t, s, other, headA)
		record := func(runID string) bool {
			t.Helper()
			ok, err := s.RecordWriteFailure(ctx, store.WriteFailure{SessionID: sess.ID, RunID: runID, Code: "invalid_checkpoint"})
			if err != nil {
				t.Fatalf("RecordWriteFailure: %v", err)
			}
			return ok
		}
		if record(sess.CurrentRun.ID) {
			t.Error("recorded a failure outside a drain")
		}
		clock.Advance(time.Second)
		startDrain(t, s)
		clock.Advance(time.Second)
		mustWrite(t, s, sess, drainDoc(sess, headA))
		mustWrite(t, s, other, drainDoc(other, headA))
		if st := drainStatus(t, s, store.DrainQuery{}); st.Counts.Blocking != 0 {
			t.Fatalf("fresh complete valid checkpoint still blocks: %+v", st.Blocking)
		}
		if record("run_0000000000000000000000000000000") {
			t.Error("recorded a failure of another run")
		}
		clock.Advance(time.Second)
		if !record(sess.CurrentRun.ID) {
			t.Fatal("a failure of the current run was not recorded")
		}
		st := drainStatus(t, s, store.DrainQuery{})
		if len(st.Blocking) != 1 || !slices.Equal(st.Blocking[0].Reasons, []checkpointd.BlockReason{checkpointd.BlockWriteFailed}) ||
			st.Blocking[0].WriteFailure != "invalid_checkpoint" || st.Blocking[0].WriteFailedAt == nil || !st.Blocking[0].WriteFailedAt.Equal(clock.Now()) {
			t.Fatalf("after a failed write: %+v", st.Blocking)
		}
		if evs := eventsOf(t, s, sess.ID, checkpointd.EventCheckpointWriteFailed); len(evs) != 1 || evs[0].RunID != sess.CurrentRun.ID {
			t.Errorf("write failure events %+v", evs)
		}
		if !record("") {
			t.Error("a failure naming no run was not recorded")
		}
		clock.Advance(time.Second)
		mustWrite(t, s, sess, drainDoc(sess, headA))
		if st := drainStatus(t, s, store.DrainQuery{}); st.Counts.Blocking != 0 {
			t.Fatalf("a successful write did not clear the failure: %+v", st.Blocking)
		}

		// A failure noted while the store was unreachable: its caller's
		// scope is checked on the row, its error record lands with it.
		failedAt := clock.Now().Add(-time.Minute)
		rec := &checkpointd.ErrorRecord{Source: checkpointd.ErrorSourceCheckpointWrite, Code: "store_unavailable", SessionID: sess.ID, At: failedAt}
		if ok, err := s.RecordWriteFailure(ctx, store.WriteFailure{SessionID: sess.ID, Code: "store_unavailable", FailedAt: failedAt,
			InScope: func(string) bool { return false }, Record: rec}); ok || !errors.Is(err, checkpointd.ErrForbidden) {
			t.Fatalf("out of scope: %v, %v; want ErrForbidden", ok, err)
		}
		if st := drainStatus(t, s, store.DrainQuery{}); st.Counts.Blocking != 0 {
			t.Fatalf("an out-of-scope failure blocks: %+v", st.Blocking)
		}
		if ok, err := s.RecordWriteFailure(ctx, store.WriteFailure{SessionID: sess.ID, Code: "store_unavailable", FailedAt: failedAt,
			InScope: func(repo string) bool { return repo == "acme/widgets" }, Record: rec}); !ok || err != nil {
			t.Fatalf("in scope: %v, %v", ok, err)
		}
		evs := eventsOf(t, s, sess.ID, checkpointd.EventCheckpointWriteFailed)
		var data struct {
			Code     string    `json:"code"`
			FailedAt time.Time `json:"failed_at"`
		}
		if err := json.Unmarshal(evs[len(evs)-1].Data, &data); err != nil || data.Code != "store_unavailable" || !data.FailedAt.Equal(failedAt) {
			t.Errorf("the noted failure's event: %s (%v)", evs[len(evs)-1].Data, err)
		}
		errs, err := s.ListErrors(ctx, store.ErrorFilter{Source: checkpointd.ErrorSourceCheckpointWrite, Limit: 10})
		if err != nil || len(errs) != 1 || errs[0].SessionID != sess.ID || errs[0].Repo != "acme/widgets" || !errs[0].At.Equal(failedAt) {
			t.Errorf("error records %+v, %v", errs, err)
		}
		mustWrite(t, s, sess, drainDoc(sess, headA))

		// Failures that went unrecorded: every active session blocks.
		if n, err := s.RecordLostWriteFailures(ctx, "write_failures_lost"); n != 2 || err != nil {
			t.Fatalf("RecordLostWriteFailures: %d, %v", n, err)
		}
		st = drainStatus(t, s, store.DrainQuery{})
		if st.Counts.Blocking != 2 || st.Blocking[0].WriteFailure != "write_failures_lost" {
			t.Fatalf("after lost failures: %+v", st.Blocking)
		}
		mustWrite(t, s, other, drainDoc(other, headA))
		if st := drainStatus(t, s, store.DrainQuery{}); st.Counts.Blocking != 1 {
			t.Fatalf("a write did not clear the lost failures: %+v", st.Blocking)
		}

		if _, err := s.EndSession(ctx, sess.ID, sess.CurrentRun.ID, checkpointd.OutcomeCompleted); err != nil {
			t.Fatal(err)
		}
		if record(sess.CurrentRun.ID) {
			t.Error("recorded a failure on an ended session")
		}
		if _, err := s.CancelDrain(ctx, "tok"); err != nil {
			t.Fatal(err)
		}
		if n, err := s.RecordLostWriteFailures(ctx, "write_failures_lost"); n != 0 || err != nil {
			t.Errorf("RecordLostWriteFailures outside a drain: %d, %v", n, err)
		}
	})
}

// TestActiveSessionCount: the trigger-kept count of active sessions agrees
// with the rows through creates, ends and deletes.
func TestActiveSessionCount(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		url := storetest.URL(t, b)
		s := storetest.OpenURL(t, url, checkpointd.SystemClock{})
		db := openRaw(t, b, url)
		var sessions []*checkpointd.Session
		for i := range 40 {
			sessions = append(sessions, drainSession(t, s, "acme/widgets", "author", "b"+string(rune('a'+i%26))))
		}
		for _, sess := range sessions[:10] {
			if _, err := s.EndSession(ctx, sess.ID, sess.CurrentRun.ID, checkpointd.OutcomeCompleted); err != nil {
				t.Fatal(err)
			}
		}
		for _, sess := range sessions[5:12] {
			if _, err := db.ExecContext(ctx, `DELETE FROM sessions WHERE id = $1`, sess.ID); err != nil {
				t.Fatal(err)
			}
		}
		startDrain(t, s)
		var rows int64
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sessions WHERE state = 'active'`).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		if st := drainStatus(t, s, store.DrainQuery{}); st.Counts.Active != rows || rows != 28 {
			t.Errorf("active count %d, rows %d, want 28", st.Counts.Active, rows)
		}
	})
}

// TestDrainMigration: sessions written before 00006 carry their latest
// checkpoint's completeness and time after migrating, and are counted.
func TestDrainMigration(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := context.Background()
		url := storetest.URL(t, b)
		db := openRaw(t, b, url)
		d := migrations.SQLite
		if b == storetest.Postgres {
			d = migrations.Postgres
		}
		p, err := migrations.Provider(ctx, d, db)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.UpTo(ctx, 5); err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{
			`INSERT INTO sessions (id, repo, repo_key, role, state, created_at, updated_at, current_run_id, run_seq, checkpoint_seq, event_seq, validity, validity_at)
VALUES ('ses_m1', 'acme/w', 'acme/w', 'author', 'active', 1, 1, 'run_m1', 1, 2, 0, 'valid', 1),
       ('ses_m2', 'acme/w', 'acme/w', 'author', 'active', 1, 1, 'run_m2', 1, 1, 0, 'valid', 1),
       ('ses_m3', 'acme/w', 'acme/w', 'author', 'ended', 1, 1, 'run_m3', 1, 0, 0, 'valid', 1),
       ('ses_m4', 'acme/w', 'acme/w', 'author', 'active', 1, 1, 'run_m4', 1, 0, 0, 'valid', 1)`,
			`INSERT INTO checkpoints (session_id, seq, run_id, fencing_token, created_at, digest, complete, missing, document) VALUES
       ('ses_m1', 1, 'run_m1', 1, 10, 'd', FALSE, '["next_action"]', '{}'),
       ('ses_m1', 2, 'run_m1', 1, 20, 'd', TRUE, '[]', '{}'),
       ('ses_m2', 1, 'run_m2', 1, 30, 'd', FALSE, '["recovery.instructions"]', '{}')`,
		} {
			if _, err := db.ExecContext(ctx, q); err != nil {
				t.Fatalf("%v\n%s", err, q)
			}
		}
		s := storetest.OpenURL(t, url, checkpointd.SystemClock{})
		var rows []struct {
			ID       string `db:"id"`
			At       int64  `db:"checkpoint_at"`
			Complete bool   `db:"latest_complete"`
			Missing  string `db:"latest_missing"`
			Ready    bool   `db:"drain_ready"`
		}
		r, err := db.QueryContext(ctx, `SELECT id, checkpoint_at, latest_complete, latest_missing, drain_ready FROM sessions ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		for r.Next() {
			var row struct {
				ID       string `db:"id"`
				At       int64  `db:"checkpoint_at"`
				Complete bool   `db:"latest_complete"`
				Missing  string `db:"latest_missing"`
				Ready    bool   `db:"drain_ready"`
			}
			if err := r.Scan(&row.ID, &row.At, &row.Complete, &row.Missing, &row.Ready); err != nil {
				t.Fatal(err)
			}
			rows = append(rows, row)
		}
		r.Close()
		want := []struct {
			ID       string `db:"id"`
			At       int64  `db:"checkpoint_at"`
			Complete bool   `db:"latest_complete"`
			Missing  string `db:"latest_missing"`
			Ready    bool   `db:"drain_ready"`
		}{
			{"ses_m1", 20, true, "[]", true},
			{"ses_m2", 30, false, `["recovery.instructions"]`, false},
			{"ses_m3", 0, false, "[]", false},
			{"ses_m4", 0, false, "[]", false},
		}
		if diff := cmp.Diff(want, rows); diff != "" {
			t.Errorf("backfilled readiness (-want +got):\n%s", diff)
		}
		startDrain(t, s)
		st := drainStatus(t, s, store.DrainQuery{})
		if diff := cmp.Diff(&checkpointd.DrainCounts{Active: 3, Blocking: 3}, st.Counts); diff != "" {
			t.Errorf("counts (-want +got):\n%s", diff)
		}
		got := map[string][]checkpointd.BlockReason{}
		for _, bl := range st.Blocking {
			got[bl.SessionID] = bl.Reasons
		}
		if diff := cmp.Diff(map[string][]checkpointd.BlockReason{
			"ses_m1": {checkpointd.BlockNoCheckpoint},
			"ses_m2": {checkpointd.BlockNoCheckpoint, checkpointd.BlockIncomplete},
			"ses_m4": {checkpointd.BlockNoCheckpoint},
		}, got); diff != "" {
			t.Errorf("reasons (-want +got):\n%s", diff)
		}
	})
}

// TestDrainCompletionRace: a session that stops being ready while the gate
// decides is never passed. On PostgreSQL the decision's first read still
// sees the session ready (the change is not committed yet); the completion
// then waits for the session's row lock, sees the change and decides again.
func TestDrainCompletionRace(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		url := storetest.URL(t, b)
		s := storetest.OpenURL(t, url, checkpointd.SystemClock{})
		var sessions []*checkpointd.Session
		for _, br := range []string{"a", "b", "c"} {
			sess := drainSession(t, s, "acme/widgets", "author", br)
			push(t, s, sess, headA)
			sessions = append(sessions, sess)
		}
		startDrain(t, s)
		for _, sess := range sessions {
			mustWrite(t, s, sess, drainDoc(sess, headA))
		}
		db := openRaw(t, b, url)
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, `UPDATE sessions SET validity = 'stale' WHERE id = $1`, sessions[1].ID); err != nil {
			t.Fatal(err)
		}
		type result struct {
			d   *checkpointd.Drain
			err error
		}
		done := make(chan result, 1)
		go func() {
			d, err := s.CompleteDrain(ctx, store.DrainCompletion{By: "tok", Limit: 10})
			done <- result{d, err}
		}()
		time.Sleep(300 * time.Millisecond)
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		res := <-done
		if res.err != nil {
			t.Fatalf("CompleteDrain: %v", res.err)
		}
		if res.d.Decision.Outcome != checkpointd.DrainOutcomeBlocked || res.d.State != checkpointd.DrainRunning ||
			len(res.d.Decision.Blocking) != 1 || res.d.Decision.Blocking[0].SessionID != sessions[1].ID {
			t.Fatalf("decision across a concurrent change: %+v %+v", res.d.State, res.d.Decision)
		}
		for _, sess := range sessions {
			if n := len(eventsOf(t, s, sess.ID, checkpointd.EventDrainCompleted)); n != 0 {
				t.Errorf("%s: a drain.completed event survived the retried decision", sess.ID)
			}
		}
	})
}
