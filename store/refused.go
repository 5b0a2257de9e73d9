package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd"
)

// refusedRun explains why a run's conditional update of a session matched
// no row, the caller's scope first: a token that may not see the session
// learns that it may not (ErrForbidden), never whether the session ended,
// which run is current or what its fencing token is (whyRejected). A
// session that does not exist is not found for every caller: there is no
// repo to hide. inScope nil checks no scope.
func (s *Store) refusedRun(ctx context.Context, tx *sqlx.Tx, sessionID, runID string, token int64, inScope func(repo string) bool) error {
	st, err := getSessionState(ctx, tx, sessionID)
	if err != nil {
		return err
	}
	if inScope != nil && !inScope(st.Repo) {
		return checkpointd.OutOfScope()
	}
	return st.refusal(sessionID, runID, token)
}

// SessionRepo returns the repo of a session, for a caller that must check
// its scope before it looks at anything else of the session (the API does,
// before an idempotency key of the session is looked up). A repo never
// changes, so the answer cannot go stale. Errors: ErrNotFound, ErrGone (a
// cleared or pruned session), ErrStoreUnavailable.
func (s *Store) SessionRepo(ctx context.Context, id string) (string, error) {
	var repo string
	err := s.rdb.GetContext(ctx, &repo, s.rdb.Rebind(`SELECT repo FROM sessions WHERE id = ?`), id)
	if errors.Is(err, sql.ErrNoRows) {
		err = notFoundOrGone(ctx, s.rdb, id)
	}
	return repo, s.classify(err)
}

// sessionState is the part of a session row that decides whether a run may
// act on it.
type sessionState struct {
	State        string `db:"state"`
	CurrentRunID string `db:"current_run_id"`
	RunSeq       int64  `db:"run_seq"`
	Repo         string `db:"repo"`
	Role         string `db:"role"`
}

func getSessionState(ctx context.Context, tx *sqlx.Tx, id string) (*sessionState, error) {
	var st sessionState
	err := tx.GetContext(ctx, &st, tx.Rebind(`SELECT state, current_run_id, run_seq, repo, role FROM sessions WHERE id = ?`), id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFoundOrGone(ctx, tx, id)
	}
	return &st, err
}

// whyRejected explains why a conditional update by a run matched no row.
// token 0 means the caller did not present a fencing token.
func (s *Store) whyRejected(ctx context.Context, tx *sqlx.Tx, sessionID, runID string, token int64) error {
	st, err := getSessionState(ctx, tx, sessionID)
	if err != nil {
		return err
	}
	return st.refusal(sessionID, runID, token)
}

// refusal is why a run, at fencing token token (0: none presented), may
// not act on a session in state st.
func (st *sessionState) refusal(sessionID, runID string, token int64) error {
	switch {
	case st.State != string(checkpointd.SessionActive):
		return fmt.Errorf("session %s: %w", sessionID, checkpointd.ErrSessionEnded)
	case st.CurrentRunID != runID:
		return fmt.Errorf("%w: that run is not the current run of session %s", checkpointd.ErrRunSuperseded, sessionID)
	case token != 0 && token != st.RunSeq:
		return fmt.Errorf("%w: fencing token %d is not the current run's token %d", checkpointd.ErrRunSuperseded, token, st.RunSeq)
	}
	return fmt.Errorf("session %s: update matched no row", sessionID)
}
