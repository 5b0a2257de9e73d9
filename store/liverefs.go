package store

import (
	"context"
	"strconv"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd"
)

// liveRef returns the live state of the ref a session is bound to: its
// branch when it has one (a PR's head is its branch's head), else its PR;
// nil when nothing was observed.
func liveRef(ctx context.Context, q sqlx.QueryerContext, repo, branch string, pr int64) (*checkpointd.LiveRef, error) {
	var refs []string
	if branch != "" {
		refs = append(refs, "branch:"+branch)
	}
	if pr > 0 {
		refs = append(refs, "pr:"+strconv.FormatInt(pr, 10))
	}
	for _, ref := range refs {
		var r liveRefRow
		err := sqlx.GetContext(ctx, q, &r, rebind(q, `SELECT head, state, observed_at, source FROM live_refs WHERE repo_key = ? AND ref = ?`),
			strings.ToLower(repo), ref)
		if err = ignoreNoRows(err); err != nil {
			return nil, err
		}
		if r.State == "" {
			continue
		}
		out := &checkpointd.LiveRef{Repo: repo, Head: r.Head, State: checkpointd.LiveRefState(r.State),
			ObservedAt: fromMicros(r.ObservedAt), Source: r.Source}
		if name, ok := strings.CutPrefix(ref, "branch:"); ok {
			out.Branch = name
		} else {
			out.PR = pr
		}
		return out, nil
	}
	return nil, nil
}

// LiveRef returns what was last observed of the ref a session is bound to,
// or nil. Errors: ErrStoreUnavailable.
func (s *Store) LiveRef(ctx context.Context, sess *checkpointd.Session) (*checkpointd.LiveRef, error) {
	r, err := liveRef(ctx, s.rdb, sess.Repo, sess.Branch, sess.PR)
	return r, s.classify(err)
}

// rebind binds a query for whichever handle runs it.
func rebind(q sqlx.QueryerContext, query string) string {
	if b, ok := q.(interface{ Rebind(string) string }); ok {
		return b.Rebind(query)
	}
	return query
}
