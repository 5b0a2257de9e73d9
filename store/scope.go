package store

import (
	"context"
	"database/sql"
	"errors"

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
	if inScope != nil {
		st, err := getSessionState(ctx, tx, sessionID)
		if err != nil {
			return err
		}
		if !inScope(st.Repo) {
			return checkpointd.OutOfScope()
		}
	}
	return s.whyRejected(ctx, tx, sessionID, runID, token)
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
