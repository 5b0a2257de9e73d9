package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd"
)

type leaseRow struct {
	ID           string        `db:"id"`
	Kind         string        `db:"kind"`
	Repo         string        `db:"repo"`
	Number       int64         `db:"number"`
	Branch       string        `db:"branch"`
	SessionID    string        `db:"session_id"`
	RunID        string        `db:"run_id"`
	FencingToken int64         `db:"fencing_token"`
	State        string        `db:"state"`
	AcquiredAt   int64         `db:"acquired_at"`
	ExpiresAt    int64         `db:"expires_at"`
	Term         int64         `db:"term"`
	EndedAt      sql.NullInt64 `db:"ended_at"`
}

const selectLease = `
SELECT id, kind, repo, number, branch, session_id, run_id, fencing_token, state, acquired_at, expires_at, term, ended_at
FROM leases`

func (r leaseRow) lease() *checkpointd.Lease {
	return &checkpointd.Lease{ID: r.ID,
		Resource: checkpointd.Resource{Kind: checkpointd.ResourceKind(r.Kind), Repo: r.Repo, Number: r.Number, Branch: r.Branch},
		Holder:   checkpointd.LeaseHolder{SessionID: r.SessionID, RunID: r.RunID}, FencingToken: r.FencingToken,
		State: checkpointd.LeaseState(r.State), AcquiredAt: fromMicros(r.AcquiredAt), ExpiresAt: fromMicros(r.ExpiresAt),
		TTLSeconds: r.Term / int64(time.Second/time.Microsecond),
		EndedAt:    fromNullMicros(r.EndedAt)}
}

func (s *Store) getLease(ctx context.Context, q sqlx.QueryerContext, id string) (*checkpointd.Lease, error) {
	var r leaseRow
	err := sqlx.GetContext(ctx, q, &r, s.rdb.Rebind(selectLease+` WHERE id = ?`), id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("no such lease: %w", checkpointd.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return r.lease(), nil
}

func (s *Store) heldLease(ctx context.Context, tx *sqlx.Tx, key string) (*checkpointd.Lease, error) {
	var id string
	if err := tx.GetContext(ctx, &id, tx.Rebind(`SELECT lease_id FROM lease_resources WHERE resource_key = ?`), key); err != nil {
		return nil, err
	}
	return s.getLease(ctx, tx, id)
}

// GetLease returns one lease grant; one whose time ran out reads as
// expired. Errors: ErrNotFound, ErrStoreUnavailable.
func (s *Store) GetLease(ctx context.Context, id string) (*checkpointd.Lease, error) {
	l, err := s.getLease(ctx, s.rdb, id)
	return l, s.classify(err)
}

// LeaseFilter selects leases to list. Zero values do not filter.
type LeaseFilter struct {
	Repo      string
	Resource  *checkpointd.Resource // exact resource
	Kind      checkpointd.ResourceKind
	SessionID string
	// IDPrefix keeps the leases whose id begins with it (a short id a
	// person typed; the caller checked its characters).
	IDPrefix string
	State    checkpointd.LeaseState
	Scope    []string // a token's repo scope (nil: all)
	Before   string   // id of the last lease of the previous page
	Limit    int
}

// ListLeases lists lease grants, newest first; those whose time ran out
// read as expired. Errors: ErrStoreUnavailable.
func (s *Store) ListLeases(ctx context.Context, f LeaseFilter) ([]checkpointd.Lease, error) {
	var where []string
	var args []any
	add := func(cond string, v ...any) { where, args = append(where, cond), append(args, v...) }
	if f.Repo != "" {
		add("repo_key = ?", strings.ToLower(f.Repo))
	}
	if f.Resource != nil {
		add("resource_key = ?", f.Resource.Key())
	}
	if f.Kind != "" {
		add("kind = ?", string(f.Kind))
	}
	if f.SessionID != "" {
		add("session_id = ?", f.SessionID)
	}
	if f.IDPrefix != "" {
		add(`id LIKE ? ESCAPE '\'`, strings.ReplaceAll(f.IDPrefix, "_", `\_`)+"%")
	}
	if f.State != "" {
		add("state = ?", string(f.State))
	}
	if f.Scope != nil {
		cond, cargs := scopeCondition(f.Scope, "repo_key", "")
		add(cond, cargs...)
	}
	if f.Before != "" {
		add("id < ?", f.Before)
	}
	q := selectLease
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY id DESC LIMIT ?"
	args = append(args, f.Limit)
	var rows []leaseRow
	if err := s.rdb.SelectContext(ctx, &rows, s.rdb.Rebind(q), args...); err != nil {
		return nil, s.classify(err)
	}
	out := make([]checkpointd.Lease, len(rows))
	for i, r := range rows {
		out[i] = *r.lease()
	}
	return out, nil
}
