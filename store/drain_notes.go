package store

import (
	"context"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd"
)

// blockedEvent is a blocked decision as a session's log records it: the
// session's own part in it (ready, or its reasons).
type blockedEvent struct {
	DrainID string                    `json:"drain_id"`
	Outcome checkpointd.DrainOutcome  `json:"outcome"`
	Ready   bool                      `json:"ready"`
	Reasons []checkpointd.BlockReason `json:"reasons"`
	Missing []string                  `json:"missing,omitempty"`
}

// NoteDrainBlocked records the blocked decisions of drainID in the event
// log of every active session, with the session's part in it: its reasons,
// or that it is ready. A session's log is told once per drain, and again
// only when what the decision says about it changed (it blocked and is
// ready now, or the reverse): what changes a session in between is in its
// log as its own events (checkpoint.written, validity.changed, ...), the
// drain row keeps every decision's counts, and a script retrying complete
// in a loop does not write 100k events per attempt.
//
// The gate runs it after it answered a blocked decision: that decision is
// durable on the drain row already, and the notes would hold the answer
// back (one row update and one event per session noted; the first call of
// a drain notes every active session). Each chunk of sessions is its own
// short transaction, so agents' writes are not held up for long. A note
// lost to a crash is written by the next decision's call. It first resets
// the sessions written before the drain (ResetWrittenBefore), so that
// those it notes blocked are found in one index. It stops when the drain
// is no longer running and returns how many sessions it noted. Errors:
// ErrStoreUnavailable.
func (s *Store) NoteDrainBlocked(ctx context.Context, drainID string) (int, error) {
	drain, err := s.runningDrain(ctx, drainID)
	if err != nil || drain == nil {
		return 0, err
	}
	if _, err := s.ResetWrittenBefore(ctx); err != nil {
		return 0, err
	}
	start, epoch := fromMicros(drain.StartedAt), drain.Epoch
	total := 0
	for _, ready := range []bool{false, true} {
		for after := ""; ; {
			// Found on a reader: the write lock is taken only for sessions
			// to note, and the update checks each again.
			ids, err := s.toNote(ctx, start, epoch, ready, after)
			if err != nil {
				return total, err
			}
			if len(ids) == 0 {
				break
			}
			after = ids[len(ids)-1]
			var noted int
			err = s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
				noted = 0
				row, err := openDrain(ctx, tx)
				if err != nil || row == nil || row.ID != drainID || row.State != string(checkpointd.DrainRunning) {
					return err
				}
				noted, err = s.note(ctx, tx, drainID, start, epoch, s.now(), ready, ids)
				return err
			})
			if err != nil {
				return total, err
			}
			total += noted
		}
	}
	return total, nil
}

// runningDrain is drainID's row, or nil when it is not the running drain.
func (s *Store) runningDrain(ctx context.Context, drainID string) (*drainRow, error) {
	row, err := openDrain(ctx, s.rdb)
	if err != nil {
		return nil, s.classify(err)
	}
	if row == nil || row.ID != drainID || row.State != string(checkpointd.DrainRunning) {
		return nil, nil
	}
	return row, nil
}

// notedOtherwise selects the sessions whose log does not say what the
// drain that started at its parameter thinks of them (ready or not): not
// noted since the drain started, or noted the other way.
const notedOtherwise = ` AND (drain_noted_at IS NULL OR drain_noted_at < ? OR drain_noted_ready <> ?)`

// toNote returns up to decisionChunk sessions with ids after after to
// note: the blocking ones (found through the partial index) or the ready
// ones for the drain of epoch (every active session is read).
func (s *Store) toNote(ctx context.Context, start time.Time, epoch int64, ready bool, after string) ([]string, error) {
	from, which, args := s.blocking(), blockingWhere, []any{}
	if ready {
		from, which, args = `sessions`, readyWhere, []any{epoch}
	}
	var ids []string
	err := s.rdb.SelectContext(ctx, &ids, s.rdb.Rebind(`SELECT id FROM `+from+` WHERE `+which+notedOtherwise+`
AND id > ? ORDER BY id LIMIT ?`), append(args, micros(start), ready, after, decisionChunk)...)
	return ids, s.classify(err)
}

// note records the decision in the logs of those of ids that still need
// it, and returns how many it noted.
func (s *Store) note(ctx context.Context, tx *sqlx.Tx, drainID string, start time.Time, epoch int64, now time.Time, ready bool, ids []string) (int, error) {
	which, args := blockingWhere, []any{micros(now), ready, ids}
	if ready {
		which, args = readyWhere, append(args, epoch)
	}
	var rows []blockerRow
	if err := selectIn(ctx, tx, &rows, `UPDATE sessions SET event_seq = event_seq + 1, drain_noted_at = ?, drain_noted_ready = ?
WHERE id IN (?) AND `+which+notedOtherwise+`
RETURNING `+blockerColumns+`, event_seq, checkpoint_seq`, append(args, micros(start), ready)...); err != nil {
		return 0, err
	}
	evs := make([]eventInsert, len(rows))
	for i := range rows {
		b := rows[i].blocker(start, epoch, now, s.liveness())
		data := blockedEvent{DrainID: drainID, Outcome: checkpointd.DrainOutcomeBlocked, Ready: ready,
			Reasons: b.Reasons, Missing: b.Missing}
		if data.Reasons == nil {
			data.Reasons = []checkpointd.BlockReason{}
		}
		evs[i] = eventInsert{sessionID: b.SessionID, seq: rows[i].EventSeq, kind: checkpointd.EventDrainBlocked,
			checkpointSeq: rows[i].CheckpointSeq, data: data}
	}
	return len(rows), insertEvents(ctx, tx, now, evs)
}

// readyWhere is the complement among active sessions of the sessions that
// block the drain of the epoch its parameter names: neither
// blockingWhere nor writtenBeforeWhere.
const readyWhere = `state = 'active' AND drain_ready AND validity = 'valid' AND (current_run_id = '' OR checkpoint_epoch >= ?)`
