package store

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
)

// PostedStatus is a commit status the daemon set on the forge
// (forgestatus): what the next update compares with.
type PostedStatus struct {
	State       string    `db:"state"`
	Description string    `db:"description"`
	TargetURL   string    `db:"target_url"`
	PostedAt    time.Time `db:"-"`
}

// PostedStatus returns the status last set on commit sha of repo; false
// when none was. Errors: ErrStoreUnavailable.
func (s *Store) PostedStatus(ctx context.Context, repo, sha string) (PostedStatus, bool, error) {
	var row struct {
		PostedStatus
		At int64 `db:"posted_at"`
	}
	err := s.rdb.GetContext(ctx, &row, s.rdb.Rebind(`SELECT state, description, target_url, posted_at FROM forge_statuses WHERE repo_key = ? AND sha = ?`),
		strings.ToLower(repo), strings.ToLower(sha))
	if errors.Is(err, sql.ErrNoRows) {
		return PostedStatus{}, false, nil
	}
	if err != nil {
		return PostedStatus{}, false, s.classify(err)
	}
	row.PostedStatus.PostedAt = fromMicros(row.At)
	return row.PostedStatus, true, nil
}

// RecordStatus records that the forge took st on commit sha of repo.
// Errors: ErrStoreUnavailable.
func (s *Store) RecordStatus(ctx context.Context, repo, sha string, st PostedStatus) error {
	return s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
		_, err := tx.ExecContext(ctx, tx.Rebind(`
INSERT INTO forge_statuses (repo_key, sha, state, description, target_url, posted_at) VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (repo_key, sha) DO UPDATE SET state = excluded.state, description = excluded.description,
    target_url = excluded.target_url, posted_at = excluded.posted_at`),
			strings.ToLower(repo), strings.ToLower(sha), st.State, st.Description, st.TargetURL, micros(st.PostedAt))
		return err
	})
}

// PruneStatuses forgets the statuses set before before: their commits are
// long behind their branches. Errors: ErrStoreUnavailable.
func (s *Store) PruneStatuses(ctx context.Context, before time.Time) (int64, error) {
	var n int64
	err := s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, tx.Rebind(`DELETE FROM forge_statuses WHERE posted_at < ?`), micros(before))
		if err == nil {
			n, _ = res.RowsAffected()
		}
		return err
	})
	return n, err
}
