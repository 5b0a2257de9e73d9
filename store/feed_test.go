package store_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// readAll reads the feed from from to a fresh head, pages of limit.
func readAll(t *testing.T, s *store.Store, from store.FeedPos, limit int) ([]store.FeedEvent, store.FeedPos) {
	t.Helper()
	to, err := s.FeedHead(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var out []store.FeedEvent
	for {
		evs, next, more, err := s.ReadFeed(t.Context(), from, to, limit)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, evs...)
		from = next
		if !more {
			return out, from
		}
	}
}

func feedKinds(evs []store.FeedEvent) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Kind)
	}
	return out
}

// TestFeedReadsCommittedChanges: the feed carries the changes of the
// table in commit order, skips audit-only kinds, and resumes from every
// event's id with no gap and no duplicate, also in a new store on the
// same database (a restart) and from ids parsed back from their text.
func TestFeedReadsCommittedChanges(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		url := storetest.URL(t, b)
		s := storetest.OpenURL(t, url, checkpointd.SystemClock{})
		ctx := t.Context()
		start, err := s.FeedHead(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sess := drainSession(t, s, "acme/widgets", "author", "fix-feed")
		push(t, s, sess, "abc")
		mustWrite(t, s, sess, drainDoc(sess, "abc"))
		if _, _, err := s.StartDrain(ctx, "deploy", "op"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CancelDrain(ctx, "op"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.StartRun(ctx, sess.ID, store.NewRun{Takeover: true, Reason: "crash", Agent: checkpointd.Agent{Runtime: "claude-code"}}); err != nil {
			t.Fatal(err)
		}
		// A push may judge the session before the write (on SQLite at
		// once; on PostgreSQL the settle worker does): what follows the
		// session's creation is fixed.
		all, _ := readAll(t, s, start, 100)
		want := feedKinds(all)
		wantTail := []string{"checkpoint.written", "validity.changed",
			"drain.started", "drain.cancelled", "run.superseded", "run.started"}
		if len(want) < 8 || want[0] != "session.created" || want[1] != "run.started" ||
			!cmp.Equal(want[len(want)-len(wantTail):], wantTail) {
			t.Fatalf("kinds %q, want session.created, run.started, [validity.changed], %q", want, wantTail)
		}
		for _, limit := range []int{1, 2, 3} {
			evs, _ := readAll(t, s, start, limit)
			if diff := cmp.Diff(want, feedKinds(evs)); diff != "" {
				t.Fatalf("limit %d: kinds (-want +got):\n%s", limit, diff)
			}
		}
		for _, e := range all {
			if e.DrainID == "" && (e.SessionID != sess.ID || e.Repo != "acme/widgets" || e.Seq == 0) {
				t.Errorf("event %+v: want session %s of acme/widgets with a seq", e, sess.ID)
			}
		}
		// Every id covers exactly the events up to its own.
		for i, e := range all {
			covers := e.Pos.Covers()
			for j, o := range all {
				if covers(o) != (j <= i) {
					t.Errorf("the id of event %d covers event %d: %v, want %v", i, j, covers(o), j <= i)
				}
			}
		}
		// A restart: a new store on the same database resumes from each id.
		s2 := storetest.OpenURL(t, url, checkpointd.SystemClock{})
		for i, e := range all {
			p, err := s2.ParseFeedPos(ctx, e.Pos.String(), time.Hour)
			if err != nil {
				t.Fatalf("parse id %q: %v", e.Pos, err)
			}
			rest, _ := readAll(t, s2, p, 3)
			if diff := cmp.Diff(want[i+1:], feedKinds(rest), cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("resume after event %d: kinds (-want +got):\n%s", i, diff)
			}
		}
	})
}

// TestFeedRefusesPositions: a garbage id, one of another database, one
// older than the backlog and one ahead of the feed are resets, each with
// its reason.
func TestFeedRefusesPositions(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		clock := checkpointd.NewManualClock(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
		s := storetest.Open(t, b, clock)
		other := storetest.Open(t, b, clock)
		ctx := t.Context()
		sess := drainSession(t, s, "acme/widgets", "author", "fix-feed")
		mustWrite(t, s, sess, drainDoc(sess, "abc"))
		head, err := s.FeedHead(ctx)
		if err != nil {
			t.Fatal(err)
		}
		otherHead, err := other.FeedHead(ctx)
		if err != nil {
			t.Fatal(err)
		}
		old := head.String()
		clock.Advance(2 * time.Hour)
		for _, tc := range []struct{ id, reason string }{
			{"", store.FeedResetUnparsable},
			{"garbage", store.FeedResetUnparsable},
			{"1.x.1.2.3.4", store.FeedResetUnparsable},
			{"1.x.1.1:1:", store.FeedResetOtherFeed}, // PostgreSQL-shaped; on SQLite unparsable
			{otherHead.String(), store.FeedResetOtherFeed},
			{old, store.FeedResetTooOld},
		} {
			_, err := s.ParseFeedPos(ctx, tc.id, time.Hour)
			var re *store.FeedResetError
			if !errors.As(err, &re) {
				t.Errorf("ParseFeedPos(%q) = %v, want a reset", tc.id, err)
				continue
			}
			if tc.id == "1.x.1.1:1:" && b == storetest.SQLite {
				tc.reason = store.FeedResetUnparsable
			}
			if re.Reason != tc.reason {
				t.Errorf("ParseFeedPos(%q): reason %q, want %q", tc.id, re.Reason, tc.reason)
			}
		}
		if _, err := s.ParseFeedPos(ctx, old, 3*time.Hour); err != nil {
			t.Errorf("an id within the backlog: %v", err)
		}
		// Ahead: a position past the head (a restored copy that fell behind).
		ahead := aheadOf(t, head)
		var re *store.FeedResetError
		if _, err := s.ParseFeedPos(ctx, ahead, 3*time.Hour); !errors.As(err, &re) || re.Reason != store.FeedResetAhead {
			t.Errorf("ParseFeedPos(%q) = %v, want reset ahead", ahead, err)
		}
	})
}

// aheadOf rewrites a position's text to lie far past it.
func aheadOf(t *testing.T, p store.FeedPos) string {
	t.Helper()
	parts := strings.Split(p.String(), ".")
	head := strings.Join(parts[:3], ".")
	if strings.Contains(parts[3], ":") {
		return head + ".999999999:999999999:"
	}
	return head + ".999999999"
}

// TestFeedOutOfOrderCommits is the race that defeats a sequence: the
// transaction that started first (the lower id) commits last. A watcher
// that read the feed between the commits, and resumes from the id of
// what it got, gets the other event once, and nothing twice.
func TestFeedOutOfOrderCommits(t *testing.T) {
	url := storetest.URL(t, storetest.Postgres)
	s := storetest.OpenURL(t, url, checkpointd.SystemClock{})
	ctx := t.Context()
	sess := drainSession(t, s, "acme/widgets", "author", "fix-race")
	db, err := sql.Open("postgres", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	start, err := s.FeedHead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	insert := func(tx *sql.Tx, seq int64) {
		t.Helper()
		if _, err := tx.ExecContext(ctx, `INSERT INTO events (session_id, seq, at, kind, run_id, data)
VALUES ($1, $2, 1, 'checkpoint.written', '', '{}')`, sess.ID, seq); err != nil {
			t.Fatal(err)
		}
	}
	first, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	insert(first, 100) // the older transaction id
	second, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	insert(second, 101)
	if err := second.Commit(); err != nil {
		t.Fatal(err)
	}
	got, _ := readAll(t, s, start, 10)
	if len(got) != 1 || got[0].Seq != 101 {
		t.Fatalf("between the commits: %+v, want seq 101 alone", got)
	}
	id := got[0].Pos.String()
	if err := first.Commit(); err != nil {
		t.Fatal(err)
	}
	p, err := s.ParseFeedPos(ctx, id, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	rest, _ := readAll(t, s, p, 10)
	if len(rest) != 1 || rest[0].Seq != 100 {
		t.Fatalf("after resuming: %+v, want seq 100 once", rest)
	}
	again, _ := readAll(t, s, rest[0].Pos, 10)
	if len(again) != 0 {
		t.Fatalf("after both: %+v, want nothing", again)
	}
}

// TestFeedWakeups: a commit wakes the feed readers of its own store and,
// on PostgreSQL, of another store on the same database (the NOTIFY the
// writer sends after its commit; the poll is set out of reach).
func TestFeedWakeups(t *testing.T) {
	store.SetFeedPoll(t, time.Hour)
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		url := storetest.URL(t, b)
		a := storetest.OpenURL(t, url, checkpointd.SystemClock{})
		readers := []*store.Store{a}
		if b == storetest.Postgres {
			readers = append(readers, storetest.OpenURL(t, url, checkpointd.SystemClock{}))
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var chans []<-chan struct{}
		for _, r := range readers {
			c, err := r.FeedWakeups(ctx)
			if err != nil {
				t.Fatal(err)
			}
			chans = append(chans, c)
		}
		drainSession(t, a, "acme/widgets", "author", "fix-wake")
		for i, c := range chans {
			select {
			case <-c:
			case <-time.After(2 * time.Second):
				t.Errorf("reader %d not woken within 2s", i)
			}
		}
	})
}

// TestRetentionPrunesDrainFeed: the drain's changes in the feed go with
// the events of their age (--retain-events).
func TestRetentionPrunesDrainFeed(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		clock := checkpointd.NewManualClock(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
		s := storetest.Open(t, b, clock)
		ctx := t.Context()
		start, err := s.FeedHead(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.StartDrain(ctx, "deploy", "op"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CancelDrain(ctx, "op"); err != nil {
			t.Fatal(err)
		}
		clock.Advance(48 * time.Hour)
		if _, _, err := s.StartDrain(ctx, "again", "op"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ApplyRetention(ctx, store.Retention{EventAge: 24 * time.Hour, Batch: 10}); err != nil {
			t.Fatal(err)
		}
		evs, _ := readAll(t, s, start, 10)
		if diff := cmp.Diff([]string{"drain.started"}, feedKinds(evs)); diff != "" {
			t.Fatalf("drain changes after retention (-want +got):\n%s", diff)
		}
	})
}

// TestFeedWakeupsPoll: a commit whose wake-up never came (here: written
// past the store, as by a replica that died before its NOTIFY) still
// wakes a PostgreSQL reader, by its poll.
func TestFeedWakeupsPoll(t *testing.T) {
	store.SetFeedPoll(t, 100*time.Millisecond)
	url := storetest.URL(t, storetest.Postgres)
	r := storetest.OpenURL(t, url, checkpointd.SystemClock{})
	c, err := r.FeedWakeups(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-c:
	case <-time.After(2 * time.Second):
		t.Fatal("reader not woken by its poll within 2s")
	}
}
