package store

import (
	"context"
	"strings"
	"time"

	"github.com/checkpointd/checkpointd"
)

// Session list orders (SessionFilter.Sort).
const (
	// SortCreated lists newest first (by id, which sorts by creation).
	SortCreated = "created"
	// SortActivity lists the most recently heard-from first: by the
	// recorded sighting (run_seen_at, which lags a run's last_seen_at by at
	// most checkpointd.SeenRefresh of --run-liveness), then id. A session
	// heard from while a client walks the pages moves up, so a walk may see
	// it twice or miss it: the order is a snapshot per page, not a cursor
	// over a fixed set.
	SortActivity = "activity"
)

// SessionFilter selects sessions to list. Zero values do not filter.
type SessionFilter struct {
	State checkpointd.SessionState
	// Repo is owner/name, or owner/* for every repo of an owner.
	Repo     string
	Validity checkpointd.Validity
	// Stage is the latest checkpoint's stage (the caller checked it is
	// configured).
	Stage string
	// WaitingOn is the latest checkpoint's blocker.waiting_on.
	WaitingOn string
	// Branch is the branch the session is bound to (exact).
	Branch string
	// IDPrefix keeps the sessions whose id begins with it (the caller
	// checked it is of id characters: a-z, 0-9, _), as a person types a
	// short id.
	IDPrefix string
	// Issue and PR, when not 0, are the issue or pull request the session
	// works on; the caller requires an exact Repo with them.
	Issue, PR int64
	// Live, when set, keeps the active sessions whose current run is live
	// (true) or unresponsive (false) under --run-liveness. A parked or
	// ended session has no current run and matches neither.
	Live *bool
	// Scope limits the list to repos a token may see (nil: all).
	Scope []string
	// Sort is SortCreated ("" too) or SortActivity.
	Sort string
	// Before is the id of the last session of the previous page; with
	// SortActivity, BeforeActivity is that session's ActivityAt too.
	Before         string
	BeforeActivity time.Time
	Limit          int
}

// ListSessions lists sessions newest first, or by activity, each with the
// leases it holds (one more query for the page). Errors: ErrStoreUnavailable.
//
// Indexes: state (sessions_state_id, or sessions_state_seen with live or
// sort=activity), repo (sessions_repo_id), validity (sessions_state_validity
// with state), stage (sessions_stage), waiting_on (sessions_waiting_on, a
// partial index of the sessions that wait on someone), branch
// (sessions_branch), issue and pr with a repo (sessions_repo_issue,
// sessions_repo_pr), owner/* (sessions_owner_id, on the generated
// repo_owner: a range in list order).
func (s *Store) ListSessions(ctx context.Context, f SessionFilter) ([]checkpointd.Session, error) {
	now, window := s.now(), s.liveness()
	q, args := listQuery(f, now, window)
	var rows []sessionRow
	if err := s.rdb.SelectContext(ctx, &rows, s.rdb.Rebind(q), args...); err != nil {
		return nil, s.classify(err)
	}
	out := make([]checkpointd.Session, len(rows))
	page := make([]*checkpointd.Session, len(rows))
	for i := range rows {
		out[i] = *rows[i].session(now, window)
		page[i] = &out[i]
	}
	if err := s.fillLeases(ctx, now, page); err != nil {
		return nil, err
	}
	return out, nil
}

// listQuery is ListSessions' statement for f at now, with its arguments.
func listQuery(f SessionFilter, now time.Time, window time.Duration) (string, []any) {
	var where []string
	var args []any
	add := func(cond string, v ...any) { where, args = append(where, cond), append(args, v...) }
	if f.State != "" {
		add("s.state = ?", string(f.State))
	}
	if f.Repo != "" {
		cond, cargs := scopeCondition([]string{f.Repo}, "s.repo_key", "s.repo_owner")
		add(cond, cargs...)
	}
	if f.Validity != "" {
		add("s.validity = ?", string(f.Validity))
	}
	if f.Stage != "" {
		add("s.stage = ?", f.Stage)
	}
	if f.Branch != "" {
		add("s.branch = ?", f.Branch)
	}
	if f.IDPrefix != "" {
		add(`s.id LIKE ? ESCAPE '\'`, strings.ReplaceAll(f.IDPrefix, "_", `\_`)+"%")
	}
	if f.Issue != 0 {
		add("s.issue = ?", f.Issue)
	}
	if f.PR != 0 {
		add("s.pr = ?", f.PR)
	}
	if f.WaitingOn != "" {
		// The predicate of the partial index, so the planners may use it.
		add("s.waiting_on <> '' AND s.waiting_on = ?", f.WaitingOn)
	}
	if f.Live != nil {
		// A run is live while max(run_seen_at, checkpoint_at) > now -
		// window (checkpointd.RunLive). run_seen_at lags that by at most
		// the refresh (every write moves it when it lags by more), so
		// run_seen_at > cutoff - refresh is a sound index range for live
		// runs; unresponsive ones have both columns at or before cutoff.
		cutoff := micros(now.Add(-window))
		if *f.Live {
			add("s.state = 'active' AND s.current_run_id <> '' AND s.run_seen_at > ? AND (s.run_seen_at > ? OR s.checkpoint_at > ?)",
				micros(now.Add(-window-checkpointd.SeenRefresh(window))), cutoff, cutoff)
		} else {
			add("s.state = 'active' AND s.current_run_id <> '' AND s.run_seen_at <= ? AND s.checkpoint_at <= ?", cutoff, cutoff)
		}
	}
	if f.Scope != nil {
		cond, cargs := scopeCondition(f.Scope, "s.repo_key", "s.repo_owner")
		add(cond, cargs...)
	}
	order := " ORDER BY s.id DESC LIMIT ?"
	if f.Sort == SortActivity {
		order = " ORDER BY s.run_seen_at DESC, s.id DESC LIMIT ?"
		if f.Before != "" {
			add("(s.run_seen_at < ? OR (s.run_seen_at = ? AND s.id < ?))",
				micros(f.BeforeActivity), micros(f.BeforeActivity), f.Before)
		}
	} else if f.Before != "" {
		add("s.id < ?", f.Before)
	}
	q := selectSession
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	return q + order, append(args, f.Limit)
}

// selectHeldLeases reads the leases a page of sessions holds, by
// leases_session (session_id, state); the caller appends the id list.
const selectHeldLeases = `
SELECT id, kind, repo, number, branch, session_id, fencing_token, expires_at
FROM leases WHERE state = 'held' AND expires_at > ? AND session_id IN (`

// fillLeases sets the leases each active session of a page holds now, in
// one query for the whole page: held and not past expires_at, whether or
// not the expiry worker has run.
func (s *Store) fillLeases(ctx context.Context, now time.Time, page []*checkpointd.Session) error {
	bySession := map[string]*checkpointd.Session{}
	args := []any{micros(now)}
	for _, sess := range page {
		if sess.State == checkpointd.SessionActive {
			bySession[sess.ID] = sess
			args = append(args, sess.ID)
		}
	}
	if len(bySession) == 0 {
		return nil
	}
	q := selectHeldLeases + strings.TrimSuffix(strings.Repeat("?, ", len(bySession)), ", ") + ") ORDER BY session_id, id"
	var rows []struct {
		ID           string `db:"id"`
		Kind         string `db:"kind"`
		Repo         string `db:"repo"`
		Number       int64  `db:"number"`
		Branch       string `db:"branch"`
		SessionID    string `db:"session_id"`
		FencingToken int64  `db:"fencing_token"`
		ExpiresAt    int64  `db:"expires_at"`
	}
	if err := s.rdb.SelectContext(ctx, &rows, s.rdb.Rebind(q), args...); err != nil {
		return s.classify(err)
	}
	for _, r := range rows {
		sess := bySession[r.SessionID]
		sess.Leases = append(sess.Leases, checkpointd.HeldLease{ID: r.ID,
			Resource:     checkpointd.Resource{Kind: checkpointd.ResourceKind(r.Kind), Repo: r.Repo, Number: r.Number, Branch: r.Branch},
			FencingToken: r.FencingToken, ExpiresAt: fromMicros(r.ExpiresAt)})
	}
	return nil
}
