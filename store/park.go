package store

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd"
)

// Operator names who acts on a session on an operator's behalf, for the
// audit trail: the token's name and id, never its secret.
type Operator struct {
	TokenID string `json:"token_id"`
	Name    string `json:"name"`
}

// park leaves the session with no current run (the empty run id matches
// no run, so every check of the current run fences the parked one off) and sets its
// drain readiness from its latest checkpoint alone: a parked session has
// no run to hold unwritten state, so it is ready when that checkpoint is
// complete and was not found unreadable (checkpointd.DrainBlockers). StartDrain keeps the
// readiness of parked sessions.
const park = `
UPDATE sessions SET current_run_id = '', updated_at = ?,
    drain_ready = (checkpoint_seq > 0 AND latest_complete AND COALESCE(unreadable_seq <> checkpoint_seq, TRUE))
WHERE id = ? AND state = 'active' AND current_run_id = ?`

// ParkSession supersedes the current run of an active session without
// starting one: the run is fenced off as by a takeover (its
// later calls answer ErrRunSuperseded, its leases move off it with new
// tokens), the session stays active and waits for the next run, which
// picks the leases up (StartRun). Allowed during a drain. inScope, when
// set, must accept the session's repo. Errors: ErrNotFound, ErrGone,
// ErrForbidden, ErrSessionEnded, ErrNoCurrentRun (already parked),
// ErrStoreUnavailable.
func (s *Store) ParkSession(ctx context.Context, sessionID string, by Operator, reason string, inScope func(string) bool) (*checkpointd.Session, error) {
	now := s.now()
	err := s.change(ctx, CauseLease, func(ctx context.Context, tx *sqlx.Tx, ch *changes) error {
		// Lock the row first (as every session-and-leases transaction
		// does), then read which run is current under the lock.
		if _, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE sessions SET updated_at = updated_at WHERE id = ?`), sessionID); err != nil {
			return err
		}
		st, err := getSessionState(ctx, tx, sessionID)
		if err != nil {
			return err
		}
		if inScope != nil && !inScope(st.Repo) {
			return checkpointd.OutOfScope()
		}
		switch {
		case st.State != string(checkpointd.SessionActive):
			return fmt.Errorf("session %s: %w", sessionID, checkpointd.ErrSessionEnded)
		case st.CurrentRunID == "":
			return fmt.Errorf("%w: session %s is parked already; a takeover starts its next run", checkpointd.ErrNoCurrentRun, sessionID)
		}
		res, err := tx.ExecContext(ctx, tx.Rebind(park), micros(now), sessionID, st.CurrentRunID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("%w: session %s changed while parking", checkpointd.ErrStoreUnavailable, sessionID)
		}
		if _, err := tx.ExecContext(ctx, tx.Rebind(supersedeRun), micros(now), "", st.CurrentRunID); err != nil {
			return err
		}
		if err := appendEvent(ctx, tx, sessionID, now, checkpointd.EventRunParked, st.CurrentRunID,
			map[string]any{"by": by, "reason": reason}); err != nil {
			return err
		}
		_, err = s.moveLeases(ctx, tx, ch, sessionID, st.CurrentRunID, "", now)
		return err
	})
	if err != nil {
		return nil, err
	}
	return s.getSession(ctx, sessionID)
}
