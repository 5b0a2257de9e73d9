package store_test

import (
	"strings"
	"testing"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestDrainVouchPass: while a drain runs, the pass reads back the latest
// checkpoint of each ready session and records it, marks one that does
// not read back (it blocks as unknown), and reads nothing again that it
// vouched for; a completion then reads back the sessions written since —
// one damaged after it was written blocks — and the notes name what was
// vouched. A cancelled drain's rows are dropped.
func TestDrainVouchPass(t *testing.T) {
	storetest.Each(t, func(t *testing.T, be storetest.Backend) {
		ctx := t.Context()
		url := storetest.URL(t, be)
		s := storetest.OpenURL(t, url, checkpointd.SystemClock{})
		raw := openRaw(t, be, url)
		rebind := func(q string) string {
			if be == storetest.SQLite {
				return q
			}
			return strings.ReplaceAll(q, "?", "$1")
		}
		damage := func(id string) {
			t.Helper()
			if _, err := raw.ExecContext(ctx, rebind(`UPDATE checkpoints SET document = replace(document, 'fix', 'fox')
WHERE session_id = ? AND seq = (SELECT checkpoint_seq FROM sessions WHERE id = session_id)`), id); err != nil {
				t.Fatal(err)
			}
		}
		vouches := func() int {
			t.Helper()
			var n int
			if err := raw.QueryRowContext(ctx, `SELECT COUNT(*) FROM drain_vouches`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		var all []*checkpointd.Session
		for _, b := range []string{"fix-1", "fix-2", "fix-3", "fix-4"} {
			x := drainSession(t, s, "acme/widgets", "author", b)
			push(t, s, x, headA)
			all = append(all, x)
		}
		if n, err := s.VouchReady(ctx); err != nil || n != 0 {
			t.Fatalf("VouchReady with no drain: %d, %v", n, err)
		}
		if _, _, err := s.StartDrain(ctx, "deploy", "tok_op"); err != nil {
			t.Fatal(err)
		}
		if n, err := s.VouchReady(ctx); err != nil || n != 0 {
			t.Fatalf("VouchReady before any session is ready: %d, %v", n, err)
		}
		for _, x := range all {
			mustWrite(t, s, x, drainDoc(x, headA))
		}
		damaged, rewritten := all[0], all[1]
		damage(damaged.ID)
		if n, err := s.VouchReady(ctx); err != nil || n != 3 {
			t.Fatalf("VouchReady: %d, %v; want the 3 that read back", n, err)
		}
		if n, err := s.VouchReady(ctx); err != nil || n != 0 {
			t.Fatalf("VouchReady again: %d, %v; want nothing read again", n, err)
		}
		st := drainStatus(t, s, store.DrainQuery{})
		if st.Counts.Blocking != 1 || st.Blocking[0].SessionID != damaged.ID {
			t.Fatalf("after the pass: %+v %+v, want the damaged session blocking", st.Counts, st.Blocking)
		}
		// Repaired by a new checkpoint; another written since the pass,
		// then damaged: the completion reads that one back itself.
		mustWrite(t, s, damaged, drainDoc(damaged, headA))
		mustWrite(t, s, rewritten, drainDoc(rewritten, headA))
		damage(rewritten.ID)
		d, err := s.CompleteDrain(ctx, store.DrainCompletion{By: "tok_op", Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if d.Decision.Outcome != checkpointd.DrainOutcomeBlocked || d.Decision.Counts.Blocking != 1 || d.Decision.Blocking[0].SessionID != rewritten.ID {
			t.Fatalf("decision %+v, want blocked by the session damaged since the pass", d.Decision)
		}
		mustWrite(t, s, rewritten, drainDoc(rewritten, headA))
		d = complete(t, s, 10)
		if d.Decision.Outcome != checkpointd.DrainOutcomeCompleted || d.Decision.Counts.Active != 4 {
			t.Fatalf("decision %+v, want completed over 4", d.Decision)
		}
		if n := vouches(); n != 4 {
			t.Errorf("%d rows in the cut, want 4", n)
		}
		if n, err := s.NoteDrainCompleted(ctx); err != nil || n != 4 {
			t.Fatalf("NoteDrainCompleted: %d, %v", n, err)
		}
		if n := vouches(); n != 0 {
			t.Errorf("%d rows left after the notes", n)
		}
		for _, x := range all {
			if evs := eventsOf(t, s, x.ID, checkpointd.EventDrainCompleted); len(evs) != 1 || evs[0].CheckpointSeq == nil || *evs[0].CheckpointSeq != getSession(t, s, x.ID).Latest.Seq {
				t.Errorf("%s: drain.completed %+v", x.ID, evs)
			}
		}

		// The next drain, vouched for and cancelled: its rows go.
		if _, err := s.CancelDrain(ctx, "tok_op"); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.StartDrain(ctx, "deploy", "tok_op"); err != nil {
			t.Fatal(err)
		}
		for _, x := range all {
			mustWrite(t, s, x, drainDoc(x, headA))
		}
		if n, err := s.VouchReady(ctx); err != nil || n != 4 {
			t.Fatalf("VouchReady: %d, %v", n, err)
		}
		if _, err := s.CancelDrain(ctx, "tok_op"); err != nil {
			t.Fatal(err)
		}
		if n, err := s.VouchReady(ctx); err != nil || n != 0 {
			t.Fatalf("VouchReady after the cancel: %d, %v", n, err)
		}
		if n, err := s.NoteDrainCompleted(ctx); err != nil || n != 0 {
			t.Fatalf("NoteDrainCompleted of a cancelled drain: %d, %v", n, err)
		}
		if n := vouches(); n != 0 {
			t.Errorf("%d rows of the cancelled drain left", n)
		}
	})
}
