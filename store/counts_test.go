package store_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// recount counts the active sessions by validity and the parked ones
// the long way, by listing every session: what the counts kept by
// triggers (session_counts) must equal.
func recount(t *testing.T, s *store.Store) (map[checkpointd.Validity]int64, int64) {
	t.Helper()
	byValidity := map[checkpointd.Validity]int64{}
	for _, v := range checkpointd.Validities {
		byValidity[v] = 0
	}
	var parked int64
	f := store.SessionFilter{State: checkpointd.SessionActive, Limit: 100}
	for {
		page, err := s.ListSessions(t.Context(), f)
		if err != nil {
			t.Fatal(err)
		}
		for _, sess := range page {
			byValidity[sess.Validity]++
			if sess.Parked {
				parked++
			}
		}
		if len(page) < f.Limit {
			return byValidity, parked
		}
		f.Before = page[len(page)-1].ID
	}
}

// TestCountsEqualARecount: after every kind of change that moves a
// session in or out of the active ones, from one validity to another or
// in or out of parked — a create, a checkpoint write, a webhook's
// observation, a reconcile pass marking refs unverified, a park, a
// takeover of the parked session, an end, a force-clear, a retention pass
// — the fleet counts equal a full recount, and so does the drain's count
// of active sessions.
func TestCountsEqualARecount(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		clock := checkpointd.NewManualClock(t0)
		s := storetest.Open(t, b, clock)
		check := func(after string) {
			t.Helper()
			got, err := s.FleetCounts(ctx)
			if err != nil {
				t.Fatal(err)
			}
			want, parked := recount(t, s)
			if diff := cmp.Diff(want, got.Active); diff != "" {
				t.Errorf("after %s: active by validity (-recount +counts):\n%s", after, diff)
			}
			if got.ByLiveness[checkpointd.LivenessParked] != parked {
				t.Errorf("after %s: %d parked counted, %d by a recount", after, got.ByLiveness[checkpointd.LivenessParked], parked)
			}
		}
		check("nothing")
		var sess []*checkpointd.Session
		for i := range 6 {
			sess = append(sess, drainSession(t, s, "acme/widgets", "author", string(rune('a'+i))))
		}
		check("creates")
		const live = "0123456789abcdef0123456789abcdef01234567"
		for _, x := range sess {
			mustWrite(t, s, x, drainDoc(x, live))
		}
		check("writes")
		for _, x := range sess[:4] {
			push(t, s, x, live) // valid: the forge says the branch is at the head written
		}
		check("webhook: valid")
		push(t, s, sess[0], "ffffffffffffffffffffffffffffffffffffffff")
		check("webhook: stale")
		if _, err := s.MarkUnverified(ctx, []store.ActiveRef{{Repo: "acme/widgets", Branch: sess[1].Branch, Sessions: []string{sess[1].ID}}},
			"the forge did not answer", "reconcile"); err != nil {
			t.Fatal(err)
		}
		check("reconcile: unverified")
		if _, err := s.ParkSession(ctx, sess[2].ID, store.Operator{Name: "op"}, "host died", nil); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ParkSession(ctx, sess[3].ID, store.Operator{Name: "op"}, "host died", nil); err != nil {
			t.Fatal(err)
		}
		check("parks")
		parked := ""
		if _, err := s.StartRun(ctx, sess[3].ID, store.NewRun{Takeover: true, Reason: "back", IfRun: &parked,
			Agent: checkpointd.Agent{Runtime: "claude-code"}}); err != nil {
			t.Fatal(err)
		}
		check("a takeover of a parked session")
		if _, err := s.EndSessionAs(ctx, store.SessionEnd{SessionID: sess[2].ID, Outcome: checkpointd.OutcomeAbandoned,
			Reason: "gone", By: &store.Operator{Name: "op"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.EndSessionAs(ctx, store.SessionEnd{SessionID: sess[4].ID, RunID: sess[4].CurrentRun.ID,
			Outcome: checkpointd.OutcomeCompleted}); err != nil {
			t.Fatal(err)
		}
		check("ends")
		if _, err := s.ClearSession(ctx, sess[0].ID, "op", "stuck"); err != nil {
			t.Fatal(err)
		}
		check("a force-clear")
		clock.Advance(48 * time.Hour)
		got, err := s.ApplyRetention(ctx, store.Retention{EndedSessionAge: time.Hour})
		if err != nil || got.Sessions != 2 {
			t.Fatalf("retention pruned %d ended sessions (%v), want 2", got.Sessions, err)
		}
		check("retention")

		// The drain counts the active sessions from the same rows.
		if _, _, err := s.StartDrain(ctx, "recount", "op"); err != nil {
			t.Fatal(err)
		}
		st, err := s.DrainStatus(ctx, store.DrainQuery{})
		if err != nil {
			t.Fatal(err)
		}
		want, _ := recount(t, s)
		var total int64
		for _, n := range want {
			total += n
		}
		if st.Counts.Active != total || total != 3 {
			t.Errorf("the drain counts %d active, a recount %d (want 3)", st.Counts.Active, total)
		}
	})
}

// TestDrainBlockingCountEqualsItsList: the drain's count of blocking
// sessions (from session_counts for sessions_drain_blocking, and the
// sessions written before the drain) equals its blocking list, read from
// the indexes, after every kind of change that moves a session's
// readiness: the start, writes complete and incomplete, a webhook's
// verdict, a recorded write failure, a park, the reset pass, an end.
func TestDrainBlockingCountEqualsItsList(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		clock := checkpointd.NewManualClock(t0)
		s := storetest.Open(t, b, clock)
		check := func(after string, want int64) {
			t.Helper()
			st, err := s.DrainStatus(ctx, store.DrainQuery{Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			if st.Counts.Blocking != int64(len(st.Blocking)) || st.Counts.Blocking != want || st.Counts.Ready != st.Counts.Active-want {
				t.Errorf("after %s: counts %+v, %d listed; want %d blocking", after, *st.Counts, len(st.Blocking), want)
			}
		}
		const head = "0123456789abcdef0123456789abcdef01234567"
		var sess []*checkpointd.Session
		for i := range 6 {
			x := drainSession(t, s, "acme/widgets", "author", string(rune('a'+i)))
			push(t, s, x, head)
			mustWrite(t, s, x, drainDoc(x, head))
			sess = append(sess, x)
		}
		clock.Advance(time.Second)
		startDrain(t, s)
		clock.Advance(time.Second)
		check("the start", 6)
		for _, x := range sess {
			mustWrite(t, s, x, drainDoc(x, head))
		}
		check("complete writes", 0)
		inc := drainDoc(sess[0], head)
		inc.NextAction = nil
		mustWrite(t, s, sess[0], inc)
		check("an incomplete write", 1)
		push(t, s, sess[1], "ffffffffffffffffffffffffffffffffffffffff")
		check("a webhook: stale", 2)
		if ok, err := s.RecordWriteFailure(ctx, store.WriteFailure{SessionID: sess[2].ID, RunID: sess[2].CurrentRun.ID, Code: "internal"}); err != nil || !ok {
			t.Fatalf("RecordWriteFailure: %v %v", ok, err)
		}
		check("a write failure", 3)
		if _, err := s.ParkSession(ctx, sess[3].ID, store.Operator{Name: "op"}, "host died", nil); err != nil {
			t.Fatal(err)
		}
		check("a park of a ready session", 3)
		if _, err := s.EndSessionAs(ctx, store.SessionEnd{SessionID: sess[0].ID, RunID: sess[0].CurrentRun.ID,
			Outcome: checkpointd.OutcomeCompleted}); err != nil {
			t.Fatal(err)
		}
		check("an end", 2)
		// The next drain: every session with a run blocks, first as written
		// before it, then, once reset, from the counts.
		if _, err := s.CancelDrain(ctx, "op"); err != nil {
			t.Fatal(err)
		}
		mustWrite(t, s, sess[1], drainDoc(sess[1], head))
		push(t, s, sess[1], head)
		clock.Advance(time.Second)
		startDrain(t, s)
		clock.Advance(time.Second)
		check("the next start", 4)
		if n, err := s.ResetWrittenBefore(ctx); err != nil || n != 3 {
			t.Fatalf("ResetWrittenBefore: %d, %v", n, err)
		}
		check("the reset pass", 4)
	})
}
