package store_test

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestDrainVouchesOnlyForWhatReadsBack: the gate completes a drain only
// over latest checkpoints it can read back whole. A latest checkpoint
// whose sealed bytes are damaged, whose document does not parse or whose
// row is missing makes the completion blocked, its session blocking with
// unknown — in the decision, in the status and in the session's log —
// until the session writes a checkpoint that reads back.
func TestDrainVouchesOnlyForWhatReadsBack(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		url := storetest.URL(t, b)
		s := storetest.OpenURL(t, url, checkpointd.SystemClock{})
		db := openRaw(t, b, url)
		names := map[string]string{}
		var sessions []*checkpointd.Session
		for _, name := range []string{"intact", "sealed", "blanked", "document", "altered", "undigested", "legacy", "missing"} {
			sess := drainSession(t, s, "acme/widgets", "author", "fix-"+name)
			push(t, s, sess, headA)
			names[sess.ID] = name
			sessions = append(sessions, sess)
		}
		startDrain(t, s)
		seqs := map[string]int64{}
		for _, sess := range sessions {
			mustWrite(t, s, sess, drainDoc(sess, headA))
			seqs[names[sess.ID]] = mustWrite(t, s, sess, drainDoc(sess, headA)).Seq
		}
		if st := drainStatus(t, s, store.DrainQuery{}); st.Counts.Blocking != 0 {
			t.Fatalf("before the damage: %+v", st.Blocking)
		}
		damage := map[string]string{
			"sealed": `UPDATE checkpoints SET sealed = substr(sealed, 1, length(sealed) - 4) || 'AAAA' WHERE session_id = $1 AND seq = $2`,
			// A row with a digest was always written with a seal: an empty
			// one lost the free text (recovery, note, prompt…).
			"blanked":  `UPDATE checkpoints SET sealed = '' WHERE session_id = $1 AND seq = $2`,
			"document": `UPDATE checkpoints SET document = '{"schema_version": 1, "stage": 5}' WHERE session_id = $1 AND seq = $2`,
			// Still parses: only the digest written with it tells.
			"altered": `UPDATE checkpoints SET document = replace(document, 'implementing', 'implementinG') WHERE session_id = $1 AND seq = $2`,
			// Still parses, and its digest blanked: an empty digest is one
			// lost, not a row from before digests (those are named by
			// migration 00023), so it is not trusted less but refused.
			"undigested": `UPDATE checkpoints SET document_digest = '', document = replace(document, 'implementing', 'implementinG') WHERE session_id = $1 AND seq = $2`,
			// Written before digests (as 00023 marks it), and does not parse.
			"legacy":  `UPDATE checkpoints SET document_digest = 'legacy:before-00013', document = '{"leases": {}}' WHERE session_id = $1 AND seq = $2`,
			"missing": `DELETE FROM checkpoints WHERE session_id = $1 AND seq = $2`,
		}
		for _, sess := range sessions {
			name := names[sess.ID]
			if q := damage[name]; q != "" {
				if _, err := db.ExecContext(ctx, q, sess.ID, seqs[name]); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
			}
		}
		// What resume and GET read of them (a seal that does not open, a
		// document that does not parse, no row): what the gate must not
		// vouch for.
		for _, sess := range sessions[1:] {
			if _, err := s.GetCheckpoint(ctx, sess.ID, 0); err == nil {
				t.Fatalf("%s: the damaged latest checkpoint reads back", names[sess.ID])
			}
		}

		d, err := s.CompleteDrain(ctx, store.DrainCompletion{By: "tok_op", Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		unknown := []checkpointd.BlockReason{checkpointd.BlockUnknown}
		want := map[string][]checkpointd.BlockReason{"sealed": unknown, "blanked": unknown, "document": unknown, "altered": unknown, "undigested": unknown, "legacy": unknown, "missing": unknown}
		if d.State != checkpointd.DrainRunning || d.Decision.Outcome != checkpointd.DrainOutcomeBlocked {
			t.Fatalf("decision over damaged checkpoints: %s %+v", d.State, d.Decision)
		}
		if got := reasonsOf(d.Decision.Blocking, names); !mapsEqual(got, want) {
			t.Errorf("decision blocks %v, want %v", got, want)
		}
		st := drainStatus(t, s, store.DrainQuery{})
		if got := reasonsOf(st.Blocking, names); !mapsEqual(got, want) || st.Counts.Blocking != 7 {
			t.Errorf("status blocks %v (%+v), want %v", got, st.Counts, want)
		}
		for _, sess := range sessions {
			if n := len(eventsOf(t, s, sess.ID, checkpointd.EventDrainCompleted)); n != 0 {
				t.Errorf("%s: %d drain.completed events", names[sess.ID], n)
			}
		}
		if _, err := s.NoteDrainBlocked(ctx, d.ID); err != nil {
			t.Fatal(err)
		}
		if evs := eventsOf(t, s, sessions[1].ID, checkpointd.EventDrainBlocked); len(evs) != 1 || !slices.Contains(blockedReasons(t, evs[0]), "unknown") {
			t.Errorf("the damaged session's log: %+v", evs)
		}

		// A checkpoint that reads back clears it.
		for _, sess := range sessions[1:] {
			mustWrite(t, s, sess, drainDoc(sess, headA))
		}
		if d := complete(t, s, 10); d.Decision.Outcome != checkpointd.DrainOutcomeCompleted {
			t.Fatalf("after fresh checkpoints: %+v", d.Decision)
		}
	})
}

// TestLegacyCheckpointReadsBack: a row from before digests, as migration
// 00023 names it, is read back by parsing it (no digest to check it by),
// and the drain vouches for it; the same row with an empty digest is not.
func TestLegacyCheckpointReadsBack(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		url := storetest.URL(t, b)
		s := storetest.OpenURL(t, url, checkpointd.SystemClock{})
		db := openRaw(t, b, url)
		sess := drainSession(t, s, "acme/widgets", "author", "fix-legacy")
		push(t, s, sess, headA)
		startDrain(t, s)
		seq := mustWrite(t, s, sess, drainDoc(sess, headA)).Seq
		setDigest := func(d string) {
			t.Helper()
			if _, err := db.ExecContext(ctx, `UPDATE checkpoints SET document_digest = $1 WHERE session_id = $2 AND seq = $3`, d, sess.ID, seq); err != nil {
				t.Fatal(err)
			}
		}
		setDigest("legacy:before-00013")
		if cp, err := s.GetCheckpoint(ctx, sess.ID, 0); err != nil || cp.Seq != seq {
			t.Fatalf("a legacy row: %+v %v", cp, err)
		}
		if d := complete(t, s, 10); d.Decision.Outcome != checkpointd.DrainOutcomeCompleted {
			t.Fatalf("completion over a legacy row: %+v", d.Decision)
		}
		startDrain(t, s)
		setDigest("")
		if _, err := s.GetCheckpoint(ctx, sess.ID, 0); !errors.Is(err, checkpointd.ErrCheckpointCorrupt) {
			t.Fatalf("a row without a digest reads back: %v", err)
		}
		if d := complete(t, s, 10); d.Decision.Outcome != checkpointd.DrainOutcomeBlocked {
			t.Fatalf("completion over a row without a digest: %+v", d.Decision)
		}
	})
}

func mapsEqual(a, b map[string][]checkpointd.BlockReason) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

func blockedReasons(t *testing.T, e checkpointd.Event) []string {
	t.Helper()
	var d struct {
		Reasons []string `json:"reasons"`
	}
	if err := json.Unmarshal(e.Data, &d); err != nil {
		t.Fatal(err)
	}
	return d.Reasons
}

// TestParkKeepsAnUnreadableCheckpointBlocking: parking a session whose
// latest checkpoint a completion found unreadable leaves it blocking as
// unknown in the drain status too. Park used to recompute its readiness
// from completeness alone, so the status showed it ready while every
// completion refused it.
func TestParkKeepsAnUnreadableCheckpointBlocking(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		url := storetest.URL(t, b)
		s := storetest.OpenURL(t, url, checkpointd.SystemClock{})
		db := openRaw(t, b, url)
		sess := drainSession(t, s, "acme/widgets", "author", "fix-park")
		push(t, s, sess, headA)
		startDrain(t, s)
		seq := mustWrite(t, s, sess, drainDoc(sess, headA)).Seq
		if _, err := db.ExecContext(ctx, `UPDATE checkpoints SET sealed = '' WHERE session_id = $1 AND seq = $2`, sess.ID, seq); err != nil {
			t.Fatal(err)
		}
		if d := complete(t, s, 10); d.Decision.Outcome != checkpointd.DrainOutcomeBlocked {
			t.Fatalf("completion over an unreadable checkpoint: %+v", d.Decision)
		}
		if _, err := s.ParkSession(ctx, sess.ID, store.Operator{TokenID: "tok_op", Name: "op"}, "agent died", nil); err != nil {
			t.Fatal(err)
		}
		st := drainStatus(t, s, store.DrainQuery{})
		if st.Counts.Blocking != 1 || len(st.Blocking) != 1 || !slices.Contains(st.Blocking[0].Reasons, checkpointd.BlockUnknown) {
			t.Fatalf("status after parking: %+v %+v", st.Counts, st.Blocking)
		}
	})
}
