package store

import (
	"context"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd"
)

// DefaultErrorsKeep is how many durable errors the store keeps per source
// unless told otherwise (SetErrorsKeep).
const DefaultErrorsKeep = 10_000

// SetErrorsKeep sets how many durable errors are kept per source (n > 0).
// Call it before the store is used concurrently.
func (s *Store) SetErrorsKeep(n int) {
	if n > 0 {
		s.errorsKeep = n
	}
}

// insertError fills repo from the session when the error names a session
// and no repo, so a checkpoint write failure is visible to the tokens that
// see its session.
const insertError = `
INSERT INTO errors (at, source, code, session_id, repo, repo_key, delivery, event, detail)
VALUES (?, ?, ?, ?,
    COALESCE(NULLIF(?, ''), (SELECT repo FROM sessions WHERE id = ?), ''),
    COALESCE(NULLIF(?, ''), (SELECT repo_key FROM sessions WHERE id = ?), ''),
    ?, ?, ?)`

// trimErrors keeps the newest rows of a source: everything at or below the
// id of the (keep+1)-th newest goes. With fewer rows the subquery is NULL
// and nothing is deleted. It walks errors_source_id, keep entries at most.
const trimErrors = `
DELETE FROM errors WHERE source = ? AND id <= (
    SELECT id FROM errors WHERE source = ? ORDER BY id DESC LIMIT 1 OFFSET ?)`

// RecordErrors appends durable errors (sanitized: see
// checkpointd.ErrorRecord.Sanitized) in one transaction and trims each
// source they touch to the newest rows kept, so a flood can never grow
// the table past the cap. Records with an unknown source are dropped.
// Errors: ErrStoreUnavailable.
func (s *Store) RecordErrors(ctx context.Context, recs []checkpointd.ErrorRecord) error {
	if len(recs) == 0 {
		return nil
	}
	now := s.now()
	return s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error { return s.insertErrors(ctx, tx, now, recs) })
}

// insertErrors is RecordErrors inside the caller's transaction.
func (s *Store) insertErrors(ctx context.Context, tx *sqlx.Tx, now time.Time, recs []checkpointd.ErrorRecord) error {
	touched := map[checkpointd.ErrorSource]bool{}
	for _, r := range recs {
		r = r.Sanitized()
		if !r.Source.Valid() {
			continue
		}
		at := r.At
		if at.IsZero() {
			at = now
		}
		if _, err := tx.ExecContext(ctx, tx.Rebind(insertError), micros(at), string(r.Source), r.Code, r.SessionID,
			r.Repo, r.SessionID, strings.ToLower(r.Repo), r.SessionID, r.Delivery, r.Event, r.Detail); err != nil {
			return err
		}
		touched[r.Source] = true
	}
	for src := range touched {
		if _, err := tx.ExecContext(ctx, tx.Rebind(trimErrors), string(src), string(src), s.errorsKeep); err != nil {
			return err
		}
	}
	return nil
}

// ErrorFilter selects durable errors to list. Zero values do not filter.
type ErrorFilter struct {
	Source checkpointd.ErrorSource
	// Since keeps errors at or after it.
	Since time.Time
	// Scope limits the list to errors about repos a token may see (nil:
	// all); an error that names no repo is then not shown.
	Scope []string
	// Before is the id of the last error of the previous page.
	Before int64
	Limit  int
}

type errorRow struct {
	ID        int64  `db:"id"`
	At        int64  `db:"at"`
	Source    string `db:"source"`
	Code      string `db:"code"`
	SessionID string `db:"session_id"`
	Repo      string `db:"repo"`
	Delivery  string `db:"delivery"`
	Event     string `db:"event"`
	Detail    string `db:"detail"`
}

// ListErrors lists durable errors newest first. Errors: ErrStoreUnavailable.
func (s *Store) ListErrors(ctx context.Context, f ErrorFilter) ([]checkpointd.ErrorRecord, error) {
	var where []string
	var args []any
	if f.Source != "" {
		where, args = append(where, "source = ?"), append(args, string(f.Source))
	}
	if !f.Since.IsZero() {
		where, args = append(where, "at >= ?"), append(args, micros(f.Since))
	}
	if f.Scope != nil {
		cond, cargs := scopeCondition(f.Scope, "repo_key", "")
		where, args = append(where, cond), append(args, cargs...)
	}
	if f.Before > 0 {
		where, args = append(where, "id < ?"), append(args, f.Before)
	}
	q := `SELECT id, at, source, code, session_id, repo, delivery, event, detail FROM errors`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY id DESC LIMIT ?"
	args = append(args, f.Limit)
	var rows []errorRow
	if err := s.rdb.SelectContext(ctx, &rows, s.rdb.Rebind(q), args...); err != nil {
		return nil, s.classify(err)
	}
	out := make([]checkpointd.ErrorRecord, len(rows))
	for i, r := range rows {
		out[i] = checkpointd.ErrorRecord{ID: r.ID, At: fromMicros(r.At), Source: checkpointd.ErrorSource(r.Source), Code: r.Code,
			SessionID: r.SessionID, Repo: r.Repo, Delivery: r.Delivery, Event: r.Event, Detail: r.Detail}
	}
	return out, nil
}
