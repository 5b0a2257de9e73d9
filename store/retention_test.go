package store_test

import (
	"context"
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

const day = 24 * time.Hour

// keptSeqs lists the seqs of a session's checkpoints, oldest first.
func keptSeqs(t *testing.T, s *store.Store, id string) []int64 {
	t.Helper()
	sums, err := s.ListCheckpoints(t.Context(), id, 0, 500)
	if err != nil {
		t.Fatalf("ListCheckpoints: %v", err)
	}
	var out []int64
	for _, c := range sums {
		out = append(out, c.Seq)
	}
	slices.Sort(out)
	return out
}

// referenced lists the checkpoint seqs a session's events refer to.
func referenced(t *testing.T, s *store.Store, id string) []int64 {
	t.Helper()
	evs, err := s.ListEvents(t.Context(), id, 0, 500)
	if err != nil {
		t.Fatalf("ListEvents: %v", err)
	}
	var out []int64
	for _, e := range evs {
		if e.CheckpointSeq != nil && !slices.Contains(out, *e.CheckpointSeq) {
			out = append(out, *e.CheckpointSeq)
		}
	}
	slices.Sort(out)
	return out
}

// TestRetentionCheckpoints: the latest N checkpoints of each session are
// kept, and so is every older one that a validity change or a drain
// decision refers to; the rest go. A pass in batches of 2 needs several
// transactions and ends where a pass in one batch ends. Numbering goes on
// after pruning.
func TestRetentionCheckpoints(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		for _, batch := range []int{500, 2} {
			ctx := t.Context()
			clock := checkpointd.NewManualClock(t0)
			s := storetest.Open(t, b, clock)

			// a: seqs 1-3 at head A; a push of B makes it stale (the event
			// refers to 3); 4 at head B makes it valid (refers to 4); 5-10
			// change nothing.
			a := drainSession(t, s, "acme/widgets", "author", "fix-a")
			for range 3 {
				clock.Advance(time.Second)
				mustWrite(t, s, a, drainDoc(a, headA))
			}
			push(t, s, a, headB)
			for range 7 {
				clock.Advance(time.Second)
				mustWrite(t, s, a, drainDoc(a, headB))
			}
			// b: a blocked drain decision refers to its seq 2.
			bs := drainSession(t, s, "acme/widgets", "author", "fix-b")
			mustWrite(t, s, bs, drainDoc(bs, headA))
			mustWrite(t, s, bs, drainDoc(bs, headA))
			if _, _, err := s.StartDrain(ctx, "retention test", "op"); err != nil {
				t.Fatal(err)
			}
			d, err := s.CompleteDrain(ctx, store.DrainCompletion{By: "op", Limit: 10})
			if err != nil || d.Decision.Outcome != checkpointd.DrainOutcomeBlocked {
				t.Fatalf("CompleteDrain: %+v %v", d, err)
			}
			if _, err := s.NoteDrainBlocked(ctx, d.ID); err != nil {
				t.Fatal(err)
			}
			for range 4 {
				mustWrite(t, s, bs, drainDoc(bs, headA))
			}
			if _, err := s.CancelDrain(ctx, "op"); err != nil {
				t.Fatal(err)
			}
			// c: fewer checkpoints than N.
			c := drainSession(t, s, "acme/widgets", "author", "fix-c")
			mustWrite(t, s, c, drainDoc(c, headA))

			// The drain decision blocked a too (no checkpoint since the
			// start): it refers to a's latest, 10.
			if diff := cmp.Diff([]int64{3, 4, 10}, referenced(t, s, a.ID)); diff != "" {
				t.Fatalf("a's events refer to (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]int64{2}, referenced(t, s, bs.ID)); diff != "" {
				t.Fatalf("b's events refer to (-want +got):\n%s", diff)
			}

			p := store.Retention{KeepCheckpoints: 3, Batch: batch}
			got, err := s.ApplyRetention(ctx, p)
			if err != nil {
				t.Fatalf("ApplyRetention: %v", err)
			}
			if got.Checkpoints != 5+2 || got.Sessions+got.Events+got.Deliveries != 0 {
				t.Errorf("batch %d: pass removed %+v, want 7 checkpoints", batch, got)
			}
			if batch == 2 && got.Batches < 4 {
				t.Errorf("batch 2: %d transactions, want at least 4 for 7 rows", got.Batches)
			}
			for _, w := range []struct {
				id   string
				want []int64
			}{{a.ID, []int64{3, 4, 8, 9, 10}}, {bs.ID, []int64{2, 4, 5, 6}}, {c.ID, []int64{1}}} {
				if diff := cmp.Diff(w.want, keptSeqs(t, s, w.id)); diff != "" {
					t.Errorf("batch %d: kept checkpoints (-want +got):\n%s", batch, diff)
				}
			}
			if _, err := s.GetCheckpoint(ctx, a.ID, 1); !errors.Is(err, checkpointd.ErrNotFound) {
				t.Errorf("a pruned checkpoint: %v, want ErrNotFound", err)
			}
			// A second pass finds nothing more.
			if again, err := s.ApplyRetention(ctx, p); err != nil || again.Total() != 0 {
				t.Errorf("second pass: %+v %v", again, err)
			}

			// The next write gets the next seq, its parent the kept latest.
			cp := mustWrite(t, s, a, drainDoc(a, headB))
			if cp.Seq != 11 || cp.ParentSeq == nil || *cp.ParentSeq != 10 {
				t.Errorf("write after pruning: seq %d parent %v, want 11 after 10", cp.Seq, cp.ParentSeq)
			}
			sess, err := s.GetSession(ctx, a.ID)
			if err != nil || sess.Latest == nil || sess.Latest.Seq != 11 || sess.Validity != checkpointd.ValidityValid {
				t.Errorf("session after pruning: %+v %v", sess, err)
			}
		}
	})
}

// TestRetentionEndedSessions: a session that ended longer ago than the age
// becomes a pruned tombstone with everything it owned; active sessions,
// however old, and recently ended ones stay. In batches of 2 (one session
// per transaction) the pass ends the same.
func TestRetentionEndedSessions(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		clock := checkpointd.NewManualClock(t0)
		s := storetest.Open(t, b, clock)

		active := drainSession(t, s, "acme/widgets", "author", "fix-a")
		mustWrite(t, s, active, drainDoc(active, headA))
		var old []*checkpointd.Session
		for range 3 {
			o := drainSession(t, s, "acme/widgets", "author", "fix-o")
			mustWrite(t, s, o, drainDoc(o, headA))
			if _, err := s.EndSession(ctx, o.ID, o.CurrentRun.ID, checkpointd.OutcomeCompleted); err != nil {
				t.Fatal(err)
			}
			old = append(old, o)
		}
		clock.Advance(20 * day)
		recent := drainSession(t, s, "acme/widgets", "author", "fix-r")
		if _, err := s.EndSession(ctx, recent.ID, recent.CurrentRun.ID, checkpointd.OutcomeAbandoned); err != nil {
			t.Fatal(err)
		}
		clock.Advance(11 * day) // old ended 31 days ago, recent 11

		got, err := s.ApplyRetention(ctx, store.Retention{EndedSessionAge: 30 * day, Batch: 2})
		if err != nil {
			t.Fatalf("ApplyRetention: %v", err)
		}
		if got.Sessions != 3 || got.Batches != 3 {
			t.Errorf("pass removed %+v, want 3 sessions in 3 transactions", got)
		}
		for _, o := range old {
			_, err := s.GetSession(ctx, o.ID)
			var gone *checkpointd.GoneError
			if !errors.As(err, &gone) || !errors.Is(err, checkpointd.ErrGone) || gone.Tombstone.Kind != checkpointd.TombstonePruned {
				t.Fatalf("pruned session: %v, want a pruned GoneError", err)
			}
			ts, err := s.Tombstone(ctx, o.ID)
			if err != nil {
				t.Fatal(err)
			}
			want := checkpointd.Tombstone{SessionID: o.ID, Repo: "acme/widgets", Role: "author", Kind: checkpointd.TombstonePruned,
				At: t0.Add(31 * day), By: "retention", Reason: ts.Reason, SessionState: checkpointd.SessionEnded, SessionCreatedAt: t0,
				Removed: checkpointd.Removed{Checkpoints: 1, Runs: 1, Events: 4}}
			if diff := cmp.Diff(want, *ts); diff != "" {
				t.Errorf("tombstone (-want +got):\n%s", diff)
			}
			for _, f := range []func() error{
				func() error { _, err := s.ListEvents(ctx, o.ID, 0, 10); return err },
				func() error { _, err := s.ListCheckpoints(ctx, o.ID, 0, 10); return err },
				func() error { _, err := s.GetCheckpoint(ctx, o.ID, 1); return err },
			} {
				if err := f(); !errors.Is(err, checkpointd.ErrGone) {
					t.Errorf("read of a pruned session: %v, want ErrGone", err)
				}
			}
		}
		for _, id := range []string{active.ID, recent.ID} {
			if _, err := s.GetSession(ctx, id); err != nil {
				t.Errorf("session %s pruned: %v", id, err)
			}
		}
		// Unknown ids stay not found.
		if _, err := s.GetSession(ctx, "ses_unknown"); !errors.Is(err, checkpointd.ErrNotFound) {
			t.Errorf("unknown session: %v", err)
		}
		// Age 0 disables the rule.
		clock.Advance(365 * day)
		if got, err := s.ApplyRetention(ctx, store.Retention{}); err != nil || got.Total() != 0 {
			t.Errorf("an all-zero policy removed %+v, %v", got, err)
		}
	})
}

// TestRetentionEventsAndDeliveries: events and deliveries older than their
// age go; an active session's event numbering continues after its old
// events went; a pruned delivery id is no longer a duplicate.
func TestRetentionEventsAndDeliveries(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		clock := checkpointd.NewManualClock(t0)
		s := storetest.Open(t, b, clock)
		sess := drainSession(t, s, "acme/widgets", "author", "fix-a")
		mustWrite(t, s, sess, drainDoc(sess, headA)) // events 1-3
		for i := range 3 {
			if _, dup, err := s.ApplyDelivery(ctx, store.DeliveryRecord{ID: "old-" + string(rune('a'+i)), Event: "push", Forge: "gitea", Repo: "acme/widgets"}, nil); err != nil || dup {
				t.Fatal(err, dup)
			}
		}
		clock.Advance(10 * day)
		mustWrite(t, s, sess, drainDoc(sess, headA)) // event 4
		if _, _, err := s.ApplyDelivery(ctx, store.DeliveryRecord{ID: "new", Event: "push", Forge: "gitea"}, nil); err != nil {
			t.Fatal(err)
		}

		got, err := s.ApplyRetention(ctx, store.Retention{EventAge: 5 * day, DeliveryAge: 5 * day, Batch: 2})
		if err != nil {
			t.Fatal(err)
		}
		if got.Events != 3 || got.Deliveries != 3 || got.Batches < 4 {
			t.Errorf("pass removed %+v, want 3 events and 3 deliveries in at least 4 transactions", got)
		}
		evs, err := s.ListEvents(ctx, sess.ID, 0, 50)
		if err != nil || len(evs) != 1 || evs[0].Seq != 4 {
			t.Fatalf("events after pruning: %+v %v, want only seq 4", evs, err)
		}
		mustWrite(t, s, sess, drainDoc(sess, headA))
		evs, err = s.ListEvents(ctx, sess.ID, 0, 50)
		if err != nil || len(evs) != 2 || evs[1].Seq != 5 {
			t.Fatalf("events after a new write: %+v %v, want seqs 4, 5", evs, err)
		}
		if _, dup, err := s.ApplyDelivery(ctx, store.DeliveryRecord{ID: "new", Event: "push", Forge: "gitea"}, nil); err != nil || !dup {
			t.Errorf("a kept delivery again: dup %v %v, want a duplicate", dup, err)
		}
		if _, dup, err := s.ApplyDelivery(ctx, store.DeliveryRecord{ID: "old-a", Event: "push", Forge: "gitea"}, nil); err != nil || dup {
			t.Errorf("a pruned delivery again: dup %v %v, want it new", dup, err)
		}
	})
}

// TestRetentionStopsOnCancel: a cancelled pass stops between batches with
// the context's error, and leaves nothing half done.
func TestRetentionStopsOnCancel(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		clock := checkpointd.NewManualClock(t0)
		s := storetest.Open(t, b, clock)
		sess := drainSession(t, s, "acme/widgets", "author", "fix-a")
		for range 5 {
			mustWrite(t, s, sess, drainDoc(sess, headA))
		}
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if _, err := s.ApplyRetention(ctx, store.Retention{KeepCheckpoints: 1, Batch: 1}); !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled pass: %v", err)
		}
		if diff := cmp.Diff([]int64{1, 2, 3, 4, 5}, keptSeqs(t, s, sess.ID)); diff != "" {
			t.Errorf("checkpoints after a cancelled pass (-want +got):\n%s", diff)
		}
		if _, err := s.ApplyRetention(t.Context(), store.Retention{KeepCheckpoints: -1}); !errors.Is(err, checkpointd.ErrInvalidRequest) {
			t.Errorf("negative policy: %v", err)
		}
	})
}

// TestRetentionPagesAcrossSessions: with Batch=2 a pass needs many
// transactions that each resume where the last stopped, across session
// boundaries and in the middle of a session; it ends exactly where a pass
// in one batch ends, and a second pass finds nothing.
func TestRetentionPagesAcrossSessions(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		clock := checkpointd.NewManualClock(t0)
		s := storetest.Open(t, b, clock)
		var ids []string
		for i := range 5 {
			sess := drainSession(t, s, "acme/widgets", "author", "fix-"+string(rune('a'+i)))
			for range 5 + i {
				clock.Advance(time.Second)
				mustWrite(t, s, sess, drainDoc(sess, headA))
			}
			ids = append(ids, sess.ID)
		}
		clock.Advance(10 * day)
		got, err := s.ApplyRetention(ctx, store.Retention{KeepCheckpoints: 2, EventAge: 5 * day, Batch: 2})
		if err != nil {
			t.Fatalf("ApplyRetention: %v", err)
		}
		// Checkpoints 3+4+5+6+7 beyond the latest 2 of each; every event
		// (2 per session, 1 more per checkpoint) is older than 5 days.
		if got.Checkpoints != 25 || got.Events != 5*2+35 || got.Batches < 13+23 {
			t.Errorf("pass removed %+v, want 25 checkpoints and 45 events in at least 36 transactions", got)
		}
		for i, id := range ids {
			n := int64(5 + i)
			if diff := cmp.Diff([]int64{n - 1, n}, keptSeqs(t, s, id)); diff != "" {
				t.Errorf("session %d: kept checkpoints (-want +got):\n%s", i, diff)
			}
			if evs, err := s.ListEvents(ctx, id, 0, 50); err != nil || len(evs) != 0 {
				t.Errorf("session %d: %d events left, %v", i, len(evs), err)
			}
		}
		if again, err := s.ApplyRetention(ctx, store.Retention{KeepCheckpoints: 2, EventAge: 5 * day, Batch: 2}); err != nil || again.Total() != 0 {
			t.Errorf("second pass: %+v %v", again, err)
		}
	})
}

// TestRetentionVisitsOnlyNewWork: the checkpoint step visits a session only
// when it has checkpoints beyond its latest N that no pass went through
// yet; a pass with nothing new visits no session, and one new checkpoint
// makes one visit. A checkpoint kept because an event referred to it goes
// in the pass that prunes that event.
func TestRetentionVisitsOnlyNewWork(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		clock := checkpointd.NewManualClock(t0)
		s := storetest.Open(t, b, clock)
		keep2 := store.Retention{KeepCheckpoints: 2, Batch: 2}

		// a: 1-3 at head A; a push of B refers to 3; 4 at head B refers to
		// 4; 5-8 change nothing.
		a := drainSession(t, s, "acme/widgets", "author", "fix-a")
		for range 3 {
			mustWrite(t, s, a, drainDoc(a, headA))
		}
		push(t, s, a, headB)
		for range 5 {
			mustWrite(t, s, a, drainDoc(a, headB))
		}
		var others []*checkpointd.Session
		for i := range 3 {
			o := drainSession(t, s, "acme/widgets", "author", "fix-o"+string(rune('a'+i)))
			for range 4 {
				mustWrite(t, s, o, drainDoc(o, headA))
			}
			others = append(others, o)
		}
		short := drainSession(t, s, "acme/widgets", "author", "fix-s") // never more than N
		mustWrite(t, s, short, drainDoc(short, headA))

		// a's range 1-6 takes three batches of 2 (3 and 4 are examined and
		// kept), each other session one.
		got, err := s.ApplyRetention(ctx, keep2)
		if err != nil || got.Checkpoints != 4+3*2 || got.CheckpointSessions != 3+3 {
			t.Fatalf("first pass: %+v %v, want 10 checkpoints in 6 session visits", got, err)
		}
		if diff := cmp.Diff([]int64{3, 4, 7, 8}, keptSeqs(t, s, a.ID)); diff != "" {
			t.Errorf("a after the first pass (-want +got):\n%s", diff)
		}
		for range 2 {
			if got, err := s.ApplyRetention(ctx, keep2); err != nil || got.Total() != 0 || got.CheckpointSessions != 0 {
				t.Errorf("pass with nothing new: %+v %v, want no session visited", got, err)
			}
		}
		mustWrite(t, s, others[1], drainDoc(others[1], headA))
		if got, err := s.ApplyRetention(ctx, keep2); err != nil || got.Checkpoints != 1 || got.CheckpointSessions != 1 {
			t.Errorf("pass after one write: %+v %v, want 1 checkpoint from 1 session", got, err)
		}
		if diff := cmp.Diff([]int64{4, 5}, keptSeqs(t, s, others[1].ID)); diff != "" {
			t.Errorf("the written session (-want +got):\n%s", diff)
		}

		// Ten days on, the events that referred to a's 3 and 4 are pruned,
		// and so are 3 and 4 in the same pass (a's mark went back to 2;
		// 3-8 take two visits of 2 checkpoints each); 9 and 10 are the
		// latest two.
		clock.Advance(10 * day)
		mustWrite(t, s, a, drainDoc(a, headB))
		mustWrite(t, s, a, drainDoc(a, headB))
		got, err = s.ApplyRetention(ctx, store.Retention{KeepCheckpoints: 2, EventAge: 5 * day, Batch: 2})
		if err != nil || got.Checkpoints != 4 || got.CheckpointSessions != 2 {
			t.Errorf("pass pruning the references: %+v %v, want a's 3, 4, 7 and 8", got, err)
		}
		if diff := cmp.Diff([]int64{9, 10}, keptSeqs(t, s, a.ID)); diff != "" {
			t.Errorf("a after its references went (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]int64{1}, keptSeqs(t, s, short.ID)); diff != "" {
			t.Errorf("short session (-want +got):\n%s", diff)
		}
	})
}

// TestRetentionTombstones: tombstones older than their age go; the id of
// a session whose tombstone went answers not found from then on (never a
// live session again), younger tombstones still answer gone, and new
// sessions work as before.
func TestRetentionTombstones(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		clock := checkpointd.NewManualClock(t0)
		s := storetest.Open(t, b, clock)
		var old []*checkpointd.Session
		for i := range 3 {
			o := drainSession(t, s, "acme/widgets", "author", "fix-"+string(rune('a'+i)))
			mustWrite(t, s, o, drainDoc(o, headA))
			if _, err := s.ClearSession(ctx, o.ID, "op", "stuck"); err != nil {
				t.Fatal(err)
			}
			old = append(old, o)
		}
		clock.Advance(200 * day)
		young := drainSession(t, s, "acme/widgets", "author", "fix-y")
		if _, err := s.ClearSession(ctx, young.ID, "op", "stuck"); err != nil {
			t.Fatal(err)
		}
		clock.Advance(200 * day) // old: 400 days, young: 200

		p := store.Retention{TombstoneAge: store.DefaultTombstoneAge, Batch: 2}
		got, err := s.ApplyRetention(ctx, p)
		if err != nil || got.Tombstones != 3 || got.Batches != 2 || got.Total() != 3 {
			t.Fatalf("pass: %+v %v, want 3 tombstones in 2 transactions", got, err)
		}
		for _, o := range old {
			if _, err := s.Tombstone(ctx, o.ID); !errors.Is(err, checkpointd.ErrNotFound) {
				t.Errorf("pruned tombstone: %v, want ErrNotFound", err)
			}
			for name, f := range map[string]func() error{
				"get":        func() error { _, err := s.GetSession(ctx, o.ID); return err },
				"late write": func() error { _, err := write(ctx, s, o.ID, drainDoc(o, headA)); return err },
				"takeover": func() error {
					_, err := s.StartRun(ctx, o.ID, store.NewRun{Takeover: true})
					return err
				},
				"events": func() error { _, err := s.ListEvents(ctx, o.ID, 0, 10); return err },
				"clear":  func() error { _, err := s.ClearSession(ctx, o.ID, "op", ""); return err },
			} {
				if err := f(); !errors.Is(err, checkpointd.ErrNotFound) || errors.Is(err, checkpointd.ErrGone) {
					t.Errorf("%s after the tombstone went: %v, want ErrNotFound", name, err)
				}
			}
		}
		if _, err := s.GetSession(ctx, young.ID); !errors.Is(err, checkpointd.ErrGone) {
			t.Errorf("a younger tombstone: %v, want ErrGone", err)
		}
		if again, err := s.ApplyRetention(ctx, p); err != nil || again.Total() != 0 {
			t.Errorf("second pass: %+v %v", again, err)
		}
		n := drainSession(t, s, "acme/widgets", "author", "fix-a")
		mustWrite(t, s, n, drainDoc(n, headA))
		if got, err := s.GetSession(ctx, n.ID); err != nil || got.Latest == nil || got.Latest.Seq != 1 {
			t.Errorf("a new session: %+v %v", got, err)
		}
		// Age 0 keeps tombstones.
		clock.Advance(10 * 365 * day)
		if got, err := s.ApplyRetention(ctx, store.Retention{}); err != nil || got.Total() != 0 {
			t.Errorf("an all-zero policy removed %+v, %v", got, err)
		}
	})
}

// TestRetentionIdempotencyKeys: keys older than the age are forgotten,
// completed or dead claims alike, in bounded batches; younger ones still
// replay. A forgotten key runs as new.
func TestRetentionIdempotencyKeys(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		clock := checkpointd.NewManualClock(t0)
		s := storetest.Open(t, b, clock)
		claim := func(key, digest string) (string, *store.Replay, error) {
			return s.ClaimIdempotency(ctx, "scope-a", key, digest)
		}
		// Five old keys: claims whose requests never completed (dead
		// claims); completed keys go by the same age.
		for i := range 5 {
			if _, _, err := claim(fmt.Sprintf("old-%d", i), "d"); err != nil {
				t.Fatal(err)
			}
			clock.Advance(time.Second) // a batch ends at a time; ties go together
		}
		clock.Advance(4 * day)
		if _, _, err := claim("young", "d"); err != nil {
			t.Fatal(err)
		}
		// A request takes over the dead claim of an old key: it is in
		// flight now, and stays however old the key.
		if c, _, err := claim("old-4", "d"); err != nil || c == "" {
			t.Fatalf("taking over a dead claim: %q, %v", c, err)
		}

		got, err := s.ApplyRetention(ctx, store.Retention{IdempotencyAge: store.DefaultIdempotencyAge, Batch: 2})
		if err != nil || got.IdempotencyKeys != 4 || got.Batches != 2 || got.Total() != 4 {
			t.Fatalf("pass: %+v %v, want 4 keys in 2 transactions", got, err)
		}
		if _, _, err := claim("old-4", "d"); !errors.Is(err, checkpointd.ErrIdempotencyInFlight) {
			t.Errorf("the taken-over key: %v, want it still in flight", err)
		}
		// The young claim is still in flight (not forgotten): a second
		// request with it waits; an old key runs as new, even with another
		// digest (it is no conflict any more).
		if _, _, err := claim("young", "d"); !errors.Is(err, checkpointd.ErrIdempotencyInFlight) {
			t.Errorf("young key: %v, want it still remembered (in flight)", err)
		}
		if c, replay, err := claim("old-0", "another digest"); err != nil || replay != nil || c == "" {
			t.Errorf("forgotten key: claim %q replay %v err %v, want a fresh claim", c, replay, err)
		}
		if again, err := s.ApplyRetention(ctx, store.Retention{IdempotencyAge: store.DefaultIdempotencyAge, Batch: 2}); err != nil || again.Total() != 0 {
			t.Errorf("second pass: %+v %v, want nothing", again, err)
		}
	})
}

// TestRetentionTrimsEventsOfEndedSessions: before an ended session is
// pruned, its events go batch by batch, leaving fewer than a batch for the
// removal's transaction; an active session's events are never trimmed.
func TestRetentionTrimsEventsOfEndedSessions(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		s := storetest.Open(t, b, checkpointd.NewManualClock(t0))
		sess := drainSession(t, s, "acme/widgets", "author", "fix-t")
		for range 3 {
			mustWrite(t, s, sess, drainDoc(sess, headA))
		}
		if n, err := store.TrimEvents(ctx, s, sess.ID, 2); err != nil || n != 0 {
			t.Fatalf("trimmed an active session: %d, %v", n, err)
		}
		if _, err := s.EndSession(ctx, sess.ID, sess.CurrentRun.ID, checkpointd.OutcomeCompleted); err != nil {
			t.Fatal(err)
		}
		before := len(kinds(t, s, sess.ID))
		n, err := store.TrimEvents(ctx, s, sess.ID, 2)
		if err != nil || n != int64(before-before%2) {
			t.Fatalf("trimmed %d of %d events (%v), want all but the last %d", n, before, err, before%2)
		}
		evs, err := s.ListEvents(ctx, sess.ID, 0, 100)
		if err != nil || len(evs) != before%2 || (len(evs) == 1 && evs[0].Seq != int64(before)) {
			t.Fatalf("left %+v, %v; want the newest %d", evs, err, before%2)
		}
	})
}

// TestRetentionLiveRefs: a live ref no active session is bound to goes with
// the deliveries that set it; one a session is bound to (by branch or by
// PR), one observed recently, one waiting to be settled and a PR that
// merged stay. Batches of two walk past the refs that stay.
func TestRetentionLiveRefs(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		clock := checkpointd.NewManualClock(t0)
		s := storetest.Open(t, b, clock)
		byBranch := drainSession(t, s, "acme/widgets", "author", "bound")
		byPR, err := s.CreateSession(ctx, store.NewSession{Repo: "acme/widgets", Role: "author", PR: 7,
			Agent: checkpointd.Agent{Runtime: "claude-code"}})
		if err != nil {
			t.Fatal(err)
		}
		observe := func(id string, o checkpointd.Observation) {
			t.Helper()
			o.Repo, o.Source = "acme/widgets", "webhook:"+id
			if _, _, err := s.ApplyDelivery(ctx, store.DeliveryRecord{ID: id, Event: "push", Forge: "gitea", Repo: "acme/widgets"},
				[]checkpointd.Observation{o}); err != nil {
				t.Fatal(err)
			}
		}
		observe("d1", checkpointd.Observation{Branch: "bound", Head: headA})
		observe("d2", checkpointd.Observation{PR: 7, Head: headA})
		observe("d3", checkpointd.Observation{Branch: "gone-a", Head: headA})
		observe("d4", checkpointd.Observation{Branch: "gone-b", Head: headA})
		observe("d5", checkpointd.Observation{PR: 8, Head: headA})
		observe("d8", checkpointd.Observation{PR: 9, Head: headA, End: checkpointd.RefMerged})
		if err := s.Settle(ctx); err != nil {
			t.Fatal(err)
		}
		observe("d6", checkpointd.Observation{Branch: "pending", Head: headA}) // not settled
		clock.Advance(10 * day)
		observe("d7", checkpointd.Observation{Branch: "recent", Head: headA})
		if err := s.Settle(ctx); err != nil { // settles d6 and d7 at the new time
			t.Fatal(err)
		}
		observe("d6b", checkpointd.Observation{Branch: "pending", Head: headB}) // pending again, observed now

		got, err := s.ApplyRetention(ctx, store.Retention{DeliveryAge: 5 * day, Batch: 2})
		if err != nil {
			t.Fatal(err)
		}
		if got.LiveRefs != 3 {
			t.Errorf("pass removed %d live refs, want 3 (gone-a, gone-b, pr 8)", got.LiveRefs)
		}
		merged, err := s.LiveRef(ctx, &checkpointd.Session{Repo: "acme/widgets", PR: 9})
		if err != nil || merged == nil || merged.State != checkpointd.RefMerged {
			t.Errorf("merged PR 9: live ref %+v (%v), want it kept: an ended PR must not come back open", merged, err)
		}
		for sess, want := range map[*checkpointd.Session]bool{byBranch: true, byPR: true} {
			live, err := s.LiveRef(ctx, sess)
			if err != nil || (live != nil) != want {
				t.Errorf("session on %q/%d: live ref %+v (%v)", sess.Branch, sess.PR, live, err)
			}
		}
		for _, branch := range []string{"gone-a", "gone-b", "recent", "pending"} {
			live, err := s.LiveRef(ctx, &checkpointd.Session{Repo: "acme/widgets", Branch: branch})
			if err != nil || (live != nil) != (branch == "recent" || branch == "pending") {
				t.Errorf("branch %s: live ref %+v (%v)", branch, live, err)
			}
		}
		if byBranch.ID == "" || byPR.ID == "" {
			t.Fatal("sessions")
		}
	})
}

// TestRetentionLiveRefBeingBound: a checkpoint write binding a session to
// an old ref holds the ref; retention waits for it and then sees the
// binding, so the ref stays. The write is stood in for by a raw
// transaction that does what WriteCheckpoint does to the two rows
// (PostgreSQL: SQLite has one writer).
func TestRetentionLiveRefBeingBound(t *testing.T) {
	url := storetest.URL(t, storetest.Postgres)
	clock := checkpointd.NewManualClock(t0)
	s := storetest.OpenURL(t, url, clock)
	ctx := t.Context()
	sess := drainSession(t, s, "acme/widgets", "author", "other")
	if _, _, err := s.ApplyDelivery(ctx, store.DeliveryRecord{ID: "d1", Event: "push", Forge: "gitea", Repo: "acme/widgets"},
		[]checkpointd.Observation{{Repo: "acme/widgets", Branch: "target", Head: headA, Source: "webhook:d1"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	clock.Advance(10 * day)
	write := holding(t, url, `UPDATE sessions SET branch = 'target' WHERE id = $1`, sess.ID)
	if _, err := write.ExecContext(ctx, `SELECT 1 FROM live_refs WHERE ref = 'branch:target' FOR SHARE`); err != nil {
		t.Fatal(err)
	}
	pruned := make(chan store.RetentionCounts, 1)
	go func() {
		c, err := s.ApplyRetention(ctx, store.Retention{DeliveryAge: 5 * day})
		if err != nil {
			t.Error(err)
		}
		pruned <- c
	}()
	time.Sleep(300 * time.Millisecond) // retention waits on the ref
	if err := write.Commit(); err != nil {
		t.Fatal(err)
	}
	if c := <-pruned; c.LiveRefs != 0 {
		t.Fatalf("retention pruned %d live refs, one of them bound while it waited", c.LiveRefs)
	}
	got, err := s.GetSession(ctx, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	if live, err := s.LiveRef(ctx, got); err != nil || live == nil || live.Head != headA {
		t.Fatalf("the bound session's live ref: %+v (%v)", live, err)
	}
}
