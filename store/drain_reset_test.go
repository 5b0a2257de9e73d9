package store_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestWrittenBeforeTheDrain: a drain's start touches no session, yet every
// session with a run whose latest checkpoint predates the start blocks it
// at once — counted, listed in id order among the other blockers, page by
// page, and in the decision — before and after the reset pass moved them
// (the pass changes no answer); a parked session keeps its readiness; a
// write after the start makes a session ready; one recorded with an older
// epoch (a write whose statement began before the start) blocks again;
// the next drain starts over.
func TestWrittenBeforeTheDrain(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		url := storetest.URL(t, b)
		clock := checkpointd.NewManualClock(t0)
		s := storetest.OpenURL(t, url, clock)
		names := map[string]string{}
		mk := func(name, branch string) *checkpointd.Session {
			sess := drainSession(t, s, "acme/widgets", "author", branch)
			names[sess.ID] = name
			if name != "unverified" {
				push(t, s, sess, headA)
			}
			return sess
		}
		early, early2, parked, incomplete := mk("early", "fix-1"), mk("early2", "fix-2"), mk("parked", "fix-3"), mk("incomplete", "fix-4")
		unverified := mk("unverified", "fix-5")
		for _, sess := range []*checkpointd.Session{early, early2, parked, unverified} {
			mustWrite(t, s, sess, drainDoc(sess, headA))
		}
		inc := drainDoc(incomplete, headA)
		inc.NextAction = nil
		mustWrite(t, s, incomplete, inc)
		if _, err := s.ParkSession(ctx, parked.ID, store.Operator{Name: "op"}, "host died", nil); err != nil {
			t.Fatal(err)
		}

		clock.Advance(time.Second)
		startDrain(t, s)
		clock.Advance(time.Second)
		want := map[string][]checkpointd.BlockReason{
			"early":      {checkpointd.BlockNoCheckpoint},
			"early2":     {checkpointd.BlockNoCheckpoint},
			"incomplete": {checkpointd.BlockNoCheckpoint, checkpointd.BlockIncomplete},
			"unverified": {checkpointd.BlockNoCheckpoint, checkpointd.BlockUnverified},
		}
		before := drainStatus(t, s, store.DrainQuery{})
		if diff := cmp.Diff(want, reasonsOf(before.Blocking, names)); diff != "" {
			t.Errorf("blocking right after the start (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(&checkpointd.DrainCounts{Active: 5, Ready: 1, Blocking: 4}, before.Counts); diff != "" {
			t.Errorf("counts right after the start (-want +got):\n%s", diff)
		}
		// Page by page, the two kinds of blocker merge in id order.
		var paged []checkpointd.DrainBlocker
		for after := ""; ; {
			page := drainStatus(t, s, store.DrainQuery{Limit: 1, After: after}).Blocking
			if len(page) == 0 {
				break
			}
			paged, after = append(paged, page...), page[0].SessionID
		}
		if diff := cmp.Diff(before.Blocking, paged); diff != "" {
			t.Errorf("pages of one (-all +paged):\n%s", diff)
		}
		if d := complete(t, s, 10); d.Decision.Outcome != checkpointd.DrainOutcomeBlocked || len(d.Decision.Blocking) != 4 {
			t.Errorf("decision right after the start: %+v", d.Decision)
		}

		n, err := s.ResetWrittenBefore(ctx)
		if err != nil || n != 3 {
			t.Fatalf("ResetWrittenBefore: %d, %v; want the 3 sessions written before that said ready", n, err)
		}
		after := drainStatus(t, s, store.DrainQuery{})
		if diff := cmp.Diff(before.Blocking, after.Blocking); diff != "" {
			t.Errorf("the reset changed the blocking list (-before +after):\n%s", diff)
		}
		if diff := cmp.Diff(before.Counts, after.Counts); diff != "" {
			t.Errorf("the reset changed the counts (-before +after):\n%s", diff)
		}
		if n, err := s.ResetWrittenBefore(ctx); err != nil || n != 0 {
			t.Errorf("a second reset: %d, %v; want nothing left", n, err)
		}

		mustWrite(t, s, early, drainDoc(early, headA))
		mustWrite(t, s, early2, drainDoc(early2, headA))
		mustWrite(t, s, incomplete, drainDoc(incomplete, headA))
		mustWrite(t, s, unverified, drainDoc(unverified, headA))
		push(t, s, unverified, headA)
		// A write recorded with the epoch before the start (its statement
		// read the epoch before the start committed): it does not count.
		raw := openRaw(t, b, url)
		if _, err := raw.ExecContext(ctx, sqlx.Rebind(sqlx.BindType(rawDriver(b)), `UPDATE sessions SET checkpoint_epoch = 0 WHERE id = ?`), early.ID); err != nil {
			t.Fatal(err)
		}
		st := drainStatus(t, s, store.DrainQuery{})
		if diff := cmp.Diff(map[string][]checkpointd.BlockReason{"early": {checkpointd.BlockNoCheckpoint}}, reasonsOf(st.Blocking, names)); diff != "" {
			t.Errorf("blocking with a write of the epoch before (-want +got):\n%s", diff)
		}
		if d := complete(t, s, 10); d.Decision.Outcome != checkpointd.DrainOutcomeBlocked {
			t.Errorf("completed past a session written before the start: %+v", d.Decision)
		}
		mustWrite(t, s, early, drainDoc(early, headA))
		if d := complete(t, s, 10); d.Decision.Outcome != checkpointd.DrainOutcomeCompleted || d.Decision.Counts.Ready != 5 {
			t.Fatalf("decision once every session wrote: %+v", d.Decision)
		}

		// The next drain: nothing written for the last one counts.
		if _, err := s.CancelDrain(ctx, "tok_test"); err != nil {
			t.Fatal(err)
		}
		startDrain(t, s)
		if c := drainStatus(t, s, store.DrainQuery{}).Counts; c.Blocking != 4 || c.Ready != 1 {
			t.Errorf("counts at the next drain's start: %+v; want the 4 sessions with a run blocking", c)
		}
	})
}

// rawDriver is openRaw's driver for b.
func rawDriver(b storetest.Backend) string {
	if b == storetest.SQLite {
		return "sqlite"
	}
	return "postgres"
}

// TestResetAnalyzesWhatItMoved (PostgreSQL): once the reset pass moved a
// fleet's sessions out of sessions_written_before, the planner knows it —
// the count of the emptied range reads the index, not the table, as it
// did on statistics that still said every session was written before the
// drain (110 ms at 100k). Autovacuum is off on the test server, as it may
// be on an operator's: only the pass's own analysis can say so.
func TestResetAnalyzesWhatItMoved(t *testing.T) {
	storetest.RequirePostgres(t)
	ctx := t.Context()
	url := storetest.URL(t, storetest.Postgres)
	const active = 5000
	s := seedDrainURL(t, storetest.Postgres, url, active, 1<<40, false) // analyzed: every session ready
	raw := openRaw(t, storetest.Postgres, url)
	if _, err := raw.ExecContext(ctx, `UPDATE drains SET is_open = NULL, state = 'cancelled'`); err != nil {
		t.Fatal(err)
	}
	startDrain(t, s)
	var count store.PlanQuery
	for _, q := range store.PlanQueries() {
		if q.Name == "written before a drain (count)" {
			count = q
		}
	}
	var epoch int64
	if err := raw.QueryRowContext(ctx, `SELECT MAX(epoch) FROM drains`).Scan(&epoch); err != nil {
		t.Fatal(err)
	}
	if n, err := s.ResetWrittenBefore(ctx); err != nil || n != active {
		t.Fatalf("ResetWrittenBefore: %d, %v; want all %d", n, err, active)
	}
	if p := explain(t, raw, sqlx.Rebind(sqlx.DOLLAR, count.Query), epoch); !strings.Contains(p, "sessions_written_before") || strings.Contains(p, "Seq Scan") {
		t.Errorf("the count of the emptied range after the reset:\n%s\nwant it read from sessions_written_before", p)
	}
}
