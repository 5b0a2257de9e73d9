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

// SetRunLiveness sets how long a run may stay unheard before it reads as
// unresponsive (d > 0; default checkpointd.DefaultRunLiveness).
func (s *Store) SetRunLiveness(d time.Duration) {
	if d > 0 {
		s.runLiveness = d
	}
}

func (s *Store) liveness() time.Duration {
	if s.runLiveness > 0 {
		return s.runLiveness
	}
	return checkpointd.DefaultRunLiveness
}

// lastSeen is when the current run was last heard from: the later of the
// sighting recorded by calls other than checkpoint writes (run_seen_at) and
// the latest checkpoint's time (checkpoint_at), which only the current run
// writes and which a takeover's sighting always follows. A checkpoint write
// so records its sighting in the column it writes anyway.
func lastSeen(runSeenAt, checkpointAt int64, now time.Time, window time.Duration) (time.Time, bool) {
	seen := fromMicros(max(runSeenAt, checkpointAt))
	return seen, checkpointd.RunLive(seen, now, window)
}

const readSighting = `SELECT state, current_run_id, run_seen_at, checkpoint_at FROM sessions WHERE id = ?`

const recordSighting = `UPDATE sessions SET run_seen_at = ?
WHERE id = ? AND state = 'active' AND current_run_id = ? AND run_seen_at < ?`

// SeeRun records that the current run of a session was heard from now (a
// heartbeat; a resume that names its run) and returns it with its
// liveness. It writes only when the recorded sighting lags now by more than
// checkpointd.SeenRefresh of the liveness window, so frequent calls cost
// one read each, not a write. Errors: ErrNotFound, ErrGone,
// ErrSessionEnded, ErrRunSuperseded (not the current run, or the session
// is parked), ErrStoreUnavailable.
func (s *Store) SeeRun(ctx context.Context, sessionID, runID string) (*checkpointd.Run, error) {
	now, window := s.now(), s.liveness()
	var row struct {
		State        string `db:"state"`
		Run          string `db:"current_run_id"`
		SeenAt       int64  `db:"run_seen_at"`
		CheckpointAt int64  `db:"checkpoint_at"`
	}
	err := s.rdb.GetContext(ctx, &row, s.rdb.Rebind(readSighting), sessionID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, s.classify(notFoundOrGone(ctx, s.rdb, sessionID))
	}
	if err != nil {
		return nil, s.classify(err)
	}
	switch {
	case row.State != string(checkpointd.SessionActive):
		return nil, fmt.Errorf("session %s: %w", sessionID, checkpointd.ErrSessionEnded)
	case row.Run != runID:
		return nil, fmt.Errorf("%w: that run is not the current run of session %s", checkpointd.ErrRunSuperseded, sessionID)
	}
	run := &checkpointd.Run{ID: runID, SessionID: sessionID}
	seen, _ := lastSeen(row.SeenAt, row.CheckpointAt, now, window)
	if now.Sub(seen) <= checkpointd.SeenRefresh(window) {
		live := true
		run.LastSeenAt, run.Live = &seen, &live
		return run, nil
	}
	err = s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, tx.Rebind(recordSighting), micros(now), sessionID, runID, micros(now))
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			// Superseded, parked or ended since the read; or a concurrent
			// sighting already recorded a time as late.
			st, err := getSessionState(ctx, tx, sessionID)
			if err != nil {
				return err
			}
			if st.State != string(checkpointd.SessionActive) || st.CurrentRunID != runID {
				return st.refusal(sessionID, runID, 0)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	live := true
	run.LastSeenAt, run.Live = &now, &live
	return run, nil
}
