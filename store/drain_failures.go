package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd"
)

// WriteFailure is a failed checkpoint write to a session, to record
// against a running drain (a write failure blocks).
type WriteFailure struct {
	SessionID string
	// RunID names the run the failed document claimed to be; it must be
	// the current run ("" when the document could not be read far enough
	// to say, or was never read: it cannot be shown to be another run's).
	RunID string
	// Code is the failure's problem code.
	Code string
	// FailedAt is when the write failed, when that was before now: a
	// failure the API kept in memory while the store could not be reached.
	// It goes into the event; the session's write_failed_at is the time of
	// the recording, so the failure blocks the drain running now.
	FailedAt time.Time
	// InScope, when set, must accept the session's repo, checked on the
	// row the recording locks: the failure of a caller whose scope could
	// not be checked when it failed.
	InScope func(repo string) bool
	// Record, when set, is appended to the durable errors in the same
	// transaction.
	Record *checkpointd.ErrorRecord
}

const recordWriteFailure = `UPDATE sessions SET write_failed_at = ?, write_failed_code = ?, drain_ready = FALSE, event_seq = event_seq + 1
WHERE id = ? AND state = 'active' AND current_run_id <> '' AND EXISTS (SELECT 1 FROM drains WHERE is_open = 1 AND state = 'running')`

// RecordWriteFailure records durably that a checkpoint write to a session
// failed during a running drain, with the failure's problem code and a
// checkpoint.write_failed event: the session then blocks the drain with
// write_failed until its next successful write. Outside a running drain,
// for an ended session or for another run than the current one nothing
// is recorded. It reports whether a failure was recorded. Errors:
// ErrForbidden (InScope refused the session's repo: nothing is recorded),
// ErrStoreUnavailable.
func (s *Store) RecordWriteFailure(ctx context.Context, f WriteFailure) (bool, error) {
	// Failed writes outside a drain are common (422s) and need no record:
	// ask the cheap question before taking the write lock.
	var n int
	if err := s.rdb.GetContext(ctx, &n, `SELECT COUNT(*) FROM drains WHERE is_open = 1 AND state = 'running'`); err != nil {
		return false, s.classify(err)
	}
	if n == 0 {
		return false, nil
	}
	now := s.now()
	recorded := false
	err := s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
		recorded = false
		q, args := recordWriteFailure, []any{micros(now), f.Code, f.SessionID}
		if f.RunID != "" {
			q, args = q+` AND current_run_id = ?`, append(args, f.RunID)
		}
		var r struct {
			Seq  int64  `db:"event_seq"`
			Run  string `db:"current_run_id"`
			Repo string `db:"repo"`
		}
		err := tx.GetContext(ctx, &r, tx.Rebind(q+` RETURNING event_seq, current_run_id, repo`), args...)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if f.InScope != nil && !f.InScope(r.Repo) {
			return checkpointd.OutOfScope()
		}
		data := map[string]any{"code": f.Code, "run_named": f.RunID != ""}
		if !f.FailedAt.IsZero() {
			data["failed_at"] = f.FailedAt.UTC()
		}
		if err := insertEvent(ctx, tx, f.SessionID, r.Seq, now, checkpointd.EventCheckpointWriteFailed, r.Run, data); err != nil {
			return err
		}
		if f.Record != nil {
			if err := s.insertErrors(ctx, tx, now, []checkpointd.ErrorRecord{*f.Record}); err != nil {
				return err
			}
		}
		recorded = true
		return nil
	})
	return recorded, err
}

// RecordLostWriteFailures records that checkpoint write failures may have
// gone unrecorded — the API could not keep them all in memory while the
// store was unreachable — so that nothing is vouched for that might have
// failed: every active session then blocks the running drain with
// write_failed (code) until its next successful write, and one durable
// error says why. Outside a running drain nothing is recorded (a drain
// started later asks every session for a new checkpoint anyway). It
// returns how many sessions it marked. A parked session is not marked: it
// has no run whose write could have failed, and none could clear the mark
// while the drain refuses new runs. Errors: ErrStoreUnavailable.
func (s *Store) RecordLostWriteFailures(ctx context.Context, code string) (int64, error) {
	now := s.now()
	var n int64
	err := s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE sessions SET write_failed_at = ?, write_failed_code = ?, drain_ready = FALSE
WHERE state = 'active' AND current_run_id <> '' AND EXISTS (SELECT 1 FROM drains WHERE is_open = 1 AND state = 'running')`), micros(now), code)
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil || n == 0 {
			return err
		}
		return s.insertErrors(ctx, tx, now, []checkpointd.ErrorRecord{{Source: checkpointd.ErrorSourceCheckpointWrite, Code: code,
			Detail: fmt.Sprintf("checkpoint write failures went unrecorded while the store could not be reached; all %d active sessions must write again", n)}})
	})
	return n, err
}
