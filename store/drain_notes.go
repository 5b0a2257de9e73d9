package store

import (
	"context"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd"
)

type blockedEvent struct {
	DrainID string                    `json:"drain_id"`
	Outcome checkpointd.DrainOutcome  `json:"outcome"`
	Reasons []checkpointd.BlockReason `json:"reasons"`
	Missing []string                  `json:"missing,omitempty"`
}

// NoteDrainBlocked records that drainID was blocked, with each session's
// reasons, in the event log of every session that blocks it and whose log
// has no such note of this drain yet. Once per drain and session: what
// changes a session later is in its log as its own event
// (checkpoint.written, validity.changed, ...), and the drain row keeps
// every decision's counts; retrying complete in a loop thus costs neither
// 5k events nor 5k row locks per attempt.
//
// The gate runs it after it answered a blocked decision: that decision is
// durable on the drain row already, and 5k events would hold the answer
// back by hundreds of milliseconds. Each chunk of sessions is its own
// short transaction, so agents' writes are not held up either. A note lost
// to a crash is written by the next decision's call. It stops when the
// drain is no longer running and returns how many sessions it noted.
// Errors: ErrStoreUnavailable.
func (s *Store) NoteDrainBlocked(ctx context.Context, drainID string) (int, error) {
	total := 0
	for after := ""; ; {
		var selected, noted int
		var last string
		err := s.inTx(ctx, func(tx *sqlx.Tx) error {
			selected, noted = 0, 0
			row, err := openDrain(ctx, tx)
			if err != nil || row == nil || row.ID != drainID || row.State != string(checkpointd.DrainRunning) {
				return err
			}
			selected, noted, last, err = s.noteBlockedChunk(ctx, tx, drainID, fromMicros(row.StartedAt), s.now(), after)
			return err
		})
		if err != nil || selected == 0 {
			return total, err
		}
		total, after = total+noted, last
	}
}

// noteBlockedChunk notes up to decisionChunk blocking sessions with ids
// after after; it returns how many it looked at and noted, and the last id.
func (s *Store) noteBlockedChunk(ctx context.Context, tx *sqlx.Tx, drainID string, start, now time.Time, after string) (selected, noted int, last string, err error) {
	const unnoted = ` AND (drain_noted_at IS NULL OR drain_noted_at < ?)`
	var ids []string
	if err := tx.SelectContext(ctx, &ids, tx.Rebind(`SELECT id FROM `+s.blocking()+` WHERE `+blockingWhere+unnoted+`
AND id > ? ORDER BY id LIMIT ?`), micros(start), after, decisionChunk); err != nil || len(ids) == 0 {
		return 0, 0, after, err
	}
	var rows []blockerRow
	if err := selectIn(ctx, tx, &rows, `UPDATE sessions SET event_seq = event_seq + 1, drain_noted_at = ?
WHERE id IN (?) AND `+blockingWhere+unnoted+`
RETURNING `+blockerColumns+`, event_seq, checkpoint_seq`, micros(now), ids, micros(start)); err != nil {
		return 0, 0, after, err
	}
	evs := make([]eventInsert, len(rows))
	for i := range rows {
		b := rows[i].blocker(start)
		evs[i] = eventInsert{sessionID: b.SessionID, seq: rows[i].EventSeq, kind: checkpointd.EventDrainBlocked,
			checkpointSeq: rows[i].CheckpointSeq, data: blockedEvent{DrainID: drainID, Outcome: checkpointd.DrainOutcomeBlocked, Reasons: b.Reasons, Missing: b.Missing}}
	}
	if err := insertEvents(ctx, tx, now, evs); err != nil {
		return 0, 0, after, err
	}
	return len(ids), len(rows), ids[len(ids)-1], nil
}
