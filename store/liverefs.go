package store

import (
	"context"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd"
)

// selectLiveRefs reads both refs a session may be bound to in one query.
const selectLiveRefs = `SELECT ref, head, state, observed_at, source, version FROM live_refs WHERE repo_key = ? AND ref IN (?, ?)`

// liveRef returns the live state of the ref a session is bound to: its
// branch when it has one (a PR's head is its branch's head), else its PR;
// nil when nothing was observed. version is the ref row's (0 with nil):
// what the one-statement write checks the evidence by (onestatement.go).
// stmt, when not nil, is selectLiveRefs prepared for q.
func liveRef(ctx context.Context, q sqlx.QueryerContext, stmt *sqlx.Stmt, repo, branch string, pr int64) (live *checkpointd.LiveRef, version int64, err error) {
	if branch == "" && pr <= 0 {
		return nil, 0, nil
	}
	// An unbound half asks for "", which names no ref.
	branchRef, prRef := "", ""
	if branch != "" {
		branchRef = checkpointd.RefKey(branch, 0)
	}
	if pr > 0 {
		prRef = checkpointd.RefKey("", pr)
	}
	var rows []struct {
		Ref string `db:"ref"`
		liveRefRow
	}
	if stmt != nil {
		err = stmt.SelectContext(ctx, &rows, strings.ToLower(repo), branchRef, prRef)
	} else {
		err = sqlx.SelectContext(ctx, q, &rows, rebind(q, selectLiveRefs), strings.ToLower(repo), branchRef, prRef)
	}
	if err != nil {
		return nil, 0, err
	}
	for _, want := range []string{branchRef, prRef} {
		for _, r := range rows {
			if want == "" || r.Ref != want || r.State == "" {
				continue
			}
			out := &checkpointd.LiveRef{Repo: repo, Head: r.Head, State: checkpointd.LiveRefState(r.State),
				ObservedAt: fromMicros(r.ObservedAt), Source: r.Source}
			if want == branchRef {
				out.Branch = branch
			} else {
				out.PR = pr
			}
			return out, r.Version, nil
		}
	}
	return nil, 0, nil
}

// LiveRef returns what was last observed of the ref a session is bound to,
// or nil. Errors: ErrStoreUnavailable.
func (s *Store) LiveRef(ctx context.Context, sess *checkpointd.Session) (*checkpointd.LiveRef, error) {
	r, _, err := liveRef(ctx, s.rdb, nil, sess.Repo, sess.Branch, sess.PR)
	return r, s.classify(err)
}

// rebind binds a query for whichever handle runs it.
func rebind(q sqlx.QueryerContext, query string) string {
	if b, ok := q.(interface{ Rebind(string) string }); ok {
		return b.Rebind(query)
	}
	return query
}

// holdRefs locks the live_refs rows of refs until the transaction ends,
// creating an empty one (an empty state, which reads as nothing observed;
// dated now, for retention) for a ref never observed, so that a first
// delivery to it waits too. Only on PostgreSQL: SQLite has one writer, so
// no delivery is in flight.
func holdRefs(ctx context.Context, tx *sqlx.Tx, repoKey string, refs []string, now time.Time) error {
	if len(refs) == 0 || tx.DriverName() != "postgres" {
		return nil
	}
	for _, ref := range refs {
		if _, err := tx.ExecContext(ctx, `INSERT INTO live_refs (repo_key, ref, state, observed_at, source) VALUES ($1, $2, '', $3, '')
ON CONFLICT (repo_key, ref) DO NOTHING`, repoKey, ref, micros(now)); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `SELECT 1 FROM live_refs WHERE repo_key = $1 AND ref = $2 FOR SHARE`, repoKey, ref); err != nil {
			return err
		}
	}
	return nil
}
