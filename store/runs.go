package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd"
)

// NewRun is what starting a run needs.
type NewRun struct {
	Takeover bool
	Reason   string
	Agent    checkpointd.Agent
	// IfRun, when set, makes a takeover conditional: it happens only while
	// *IfRun is the current run, or, when it is "", while none is (a
	// parked session). Otherwise checkpointd.ErrRunChanged: of two agents
	// claiming one handed-off session, one wins.
	IfRun *string
}

// StartedRun is a run just started, with the leases it holds: those of
// the run it superseded, moved to it under new fencing tokens.
type StartedRun struct {
	*checkpointd.Run
	Leases []checkpointd.Lease
}

// takeOver and startParked share their text by composition, not by
// editing one into the other: a replace that stops matching would change
// nothing, silently.
const (
	startRunSet = `
UPDATE sessions SET current_run_id = ?, run_seq = run_seq + 1, event_seq = event_seq + 2, updated_at = ?, run_seen_at = ?
WHERE id = ? AND state = 'active'`
	startRunReturning = `
RETURNING run_seq, event_seq`
	takeOver = startRunSet + startRunReturning
)

const supersedeRun = `UPDATE runs SET superseded_at = ?, superseded_by = ? WHERE id = ?`

// startParked is takeOver for a parked session: only while it still has
// no current run, so a run started concurrently is never superseded by a
// start that did not ask to take over.
const startParked = startRunSet + ` AND current_run_id = ''` + startRunReturning

// takeOverIf is takeOver only while the given run is current (the empty
// id for none): the conditional takeover of NewRun.IfRun.
const takeOverIf = startRunSet + ` AND current_run_id = ?` + startRunReturning

// StartRun starts a new run on an active session. Without takeover it fails
// with checkpointd.ErrRunActive while the session has a current run; with
// takeover the current run is superseded and the new run gets the next
// fencing token. A parked session (no current run) starts its next run
// either way. The new run picks up the session's held leases with new
// tokens, and the answer lists them. Concurrent takeovers serialise on the
// session row and leave exactly one current run. Errors: ErrNotFound,
// ErrSessionEnded, ErrDraining (a drain gates new runs), ErrRunActive,
// ErrRunChanged (IfRun no longer holds), ErrInvalidRequest (IfRun without
// Takeover), ErrStoreUnavailable.
func (s *Store) StartRun(ctx context.Context, sessionID string, in NewRun) (*StartedRun, error) {
	if in.IfRun != nil && !in.Takeover {
		return nil, checkpointd.Invalid("/if_run", "only with takeover: true")
	}
	now := s.now()
	rid := checkpointd.NewID(checkpointd.PrefixRun)
	agentJSON, _ := json.Marshal(in.Agent)
	live := true
	run := &checkpointd.Run{ID: rid, SessionID: sessionID, Agent: in.Agent, StartedAt: now, TakeoverReason: in.Reason,
		LastSeenAt: &now, Live: &live}
	var leases []checkpointd.Lease
	err := s.change(ctx, CauseLease, func(ctx context.Context, tx *sqlx.Tx, ch *changes) error {
		st, err := getSessionState(ctx, tx, sessionID)
		if err != nil {
			return err
		}
		if st.State != string(checkpointd.SessionActive) {
			return checkpointd.ErrSessionEnded
		}
		if err := s.refuseIfDraining(ctx, tx); err != nil {
			return err
		}
		q, args := takeOver, []any{rid, micros(now), micros(now), sessionID}
		switch {
		case !in.Takeover:
			if st.CurrentRunID != "" {
				return fmt.Errorf("%w: run %s is current; start with takeover to supersede it", checkpointd.ErrRunActive, st.CurrentRunID)
			}
			q = startParked
		case in.IfRun != nil:
			if st.CurrentRunID != *in.IfRun {
				return runChanged(st.CurrentRunID)
			}
			q, args = takeOverIf, append(args, *in.IfRun)
		}
		var token, eseq int64
		if err := tx.QueryRowxContext(ctx, tx.Rebind(q), args...).Scan(&token, &eseq); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				// Force-cleared between the read and the update: gone,
				// not ended (the row and its tombstone are read afresh).
				if _, err := getSessionState(ctx, tx, sessionID); err != nil {
					return err
				}
			}
			if errors.Is(err, sql.ErrNoRows) && !in.Takeover {
				return fmt.Errorf("%w: a run started meanwhile; start with takeover to supersede it", checkpointd.ErrRunActive)
			}
			if errors.Is(err, sql.ErrNoRows) && in.IfRun != nil {
				if st, rerr := getSessionState(ctx, tx, sessionID); rerr == nil && st.State == string(checkpointd.SessionActive) {
					return runChanged(st.CurrentRunID) // another claimant won
				}
			}
			if errors.Is(err, sql.ErrNoRows) {
				return checkpointd.ErrSessionEnded // ended between the read and the update
			}
			return err
		}
		// The row is locked now; re-read which run we supersede, since a
		// concurrent takeover or park may have committed after our first
		// read. A run superseded already was parked: nothing to supersede.
		var old struct {
			ID           string        `db:"id"`
			SupersededAt sql.NullInt64 `db:"superseded_at"`
		}
		if err := tx.GetContext(ctx, &old, tx.Rebind(`SELECT id, superseded_at FROM runs WHERE session_id = ? AND fencing_token = ?`), sessionID, token-1); err != nil {
			return err
		}
		parked := old.SupersededAt.Valid
		run.FencingToken = token
		if !parked {
			if _, err := tx.ExecContext(ctx, tx.Rebind(supersedeRun), micros(now), rid, old.ID); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, tx.Rebind(insertRun), rid, sessionID, token, string(agentJSON), micros(now), in.Reason); err != nil {
			return err
		}
		// takeOver claimed two event seqs: the supersession's and the start's.
		kind, data := checkpointd.EventRunSuperseded, map[string]any{"superseded_by": rid, "reason": in.Reason}
		if parked {
			kind, data = checkpointd.EventRunUnparked, map[string]any{"run_id": rid}
		}
		if err := insertEvent(ctx, tx, sessionID, eseq-1, now, kind, old.ID, data); err != nil {
			return err
		}
		if err := insertEvent(ctx, tx, sessionID, eseq, now, checkpointd.EventRunStarted, rid,
			map[string]any{"fencing_token": token, "takeover": in.Takeover, "after_park": parked, "reason": in.Reason, "agent": in.Agent}); err != nil {
			return err
		}
		moved, err := s.moveLeases(ctx, tx, ch, sessionID, old.ID, rid, now)
		leases = moved
		return err
	})
	if err != nil {
		return nil, err
	}
	if leases == nil {
		leases = []checkpointd.Lease{}
	}
	return &StartedRun{Run: run, Leases: leases}, nil
}

// runChanged is the refusal of a conditional takeover whose run is no
// longer (or not yet) current: it names the current run, which the caller
// may see anyway by reading the session.
func runChanged(current string) error {
	if current == "" {
		return fmt.Errorf("%w: no run is current now (the session was parked)", checkpointd.ErrRunChanged)
	}
	return fmt.Errorf("%w: run %s is current now", checkpointd.ErrRunChanged, current)
}

const (
	endSessionSet = `
UPDATE sessions SET state = 'ended', outcome = ?, end_reason = ?, ended_by = ?, ended_at = ?, updated_at = ?, run_seen_at = ?, event_seq = event_seq + 1
WHERE id = ? AND state = 'active'`
	endSessionReturning = `
RETURNING event_seq, current_run_id`
	endSession = endSessionSet + ` AND current_run_id = ?` + endSessionReturning
	// endOnBehalf is endSession for an operator: whichever run is
	// current, or none (parked).
	endOnBehalf = endSessionSet + endSessionReturning
)

// SessionEnd is what ending a session needs; the API validated it.
type SessionEnd struct {
	SessionID string
	// RunID is the current run ending its session; "" only with By.
	RunID   string
	Outcome checkpointd.Outcome
	// Reason is why (redacted by the caller); it goes to the event.
	Reason string
	// By, when set, is the operator who ends the session on behalf of its
	// agent (a dead agent cannot): without RunID, any current run or none.
	By *Operator
}

// EndSession ends an active session on behalf of its current run.
// Errors: ErrNotFound, ErrSessionEnded, ErrRunSuperseded, ErrStoreUnavailable.
func (s *Store) EndSession(ctx context.Context, sessionID, runID string, outcome checkpointd.Outcome) (*checkpointd.Session, error) {
	return s.EndSessionAs(ctx, SessionEnd{SessionID: sessionID, RunID: runID, Outcome: outcome})
}

// EndSessionAs ends an active session and releases its leases, with a
// session.ended event naming the ending run, the operator (when By is set)
// and the reason. Without RunID it needs By: an operator ends the session
// whatever run is current. Errors: ErrNotFound, ErrGone, ErrSessionEnded,
// ErrRunSuperseded (RunID not current), ErrInvalidRequest (neither RunID
// nor By), ErrStoreUnavailable.
func (s *Store) EndSessionAs(ctx context.Context, in SessionEnd) (*checkpointd.Session, error) {
	if in.RunID == "" && in.By == nil {
		return nil, checkpointd.Invalid("/run_id", "required")
	}
	now := s.now()
	err := s.change(ctx, CauseLease, func(ctx context.Context, tx *sqlx.Tx, ch *changes) error {
		var row struct {
			EventSeq int64  `db:"event_seq"`
			Run      string `db:"current_run_id"`
		}
		by := ""
		if in.By != nil {
			by = in.By.Name
		}
		q, args := endSession, []any{string(in.Outcome), in.Reason, by, micros(now), micros(now), micros(now), in.SessionID, in.RunID}
		if in.RunID == "" {
			q, args = endOnBehalf, args[:len(args)-1]
		}
		err := tx.GetContext(ctx, &row, tx.Rebind(q), args...)
		if errors.Is(err, sql.ErrNoRows) {
			return s.whyRejected(ctx, tx, in.SessionID, in.RunID, 0)
		}
		if err != nil {
			return err
		}
		data := map[string]any{"outcome": in.Outcome}
		if in.Reason != "" {
			data["reason"] = in.Reason
		}
		if in.By != nil {
			data["by"] = in.By
		}
		if err := insertEvent(ctx, tx, in.SessionID, row.EventSeq, now, checkpointd.EventSessionEnded, row.Run, data); err != nil {
			return err
		}
		return s.releaseSessionLeases(ctx, tx, ch, in.SessionID, now)
	})
	if err != nil {
		return nil, err
	}
	return s.getSession(ctx, in.SessionID)
}
