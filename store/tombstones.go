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

type tombstoneRow struct {
	SessionID        string `db:"session_id"`
	Repo             string `db:"repo"`
	Role             string `db:"role"`
	Kind             string `db:"kind"`
	At               int64  `db:"at"`
	Actor            string `db:"actor"`
	Reason           string `db:"reason"`
	SessionState     string `db:"session_state"`
	SessionCreatedAt int64  `db:"session_created_at"`
	Removed          string `db:"removed"`
}

func (r *tombstoneRow) tombstone() *checkpointd.Tombstone {
	t := &checkpointd.Tombstone{SessionID: r.SessionID, Repo: r.Repo, Role: r.Role, Kind: checkpointd.TombstoneKind(r.Kind),
		At: fromMicros(r.At), By: r.Actor, Reason: r.Reason, SessionState: checkpointd.SessionState(r.SessionState),
		SessionCreatedAt: fromMicros(r.SessionCreatedAt)}
	_ = jsonUnmarshal(r.Removed, &t.Removed)
	return t
}

const selectTombstone = `SELECT session_id, repo, role, kind, at, actor, reason, session_state, session_created_at, removed
FROM tombstones WHERE session_id = ?`

// notFoundOrGone explains why a lookup of session id found nothing: a
// tombstone makes it *checkpointd.GoneError (410), else it is ErrNotFound.
// Callers ask only after a miss, so a request on a live session never reads
// the tombstones.
func notFoundOrGone(ctx context.Context, q sqlx.QueryerContext, id string) error {
	var row tombstoneRow
	err := sqlx.GetContext(ctx, q, &row, sqlx.Rebind(bindOf(q), selectTombstone), id)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("no such session: %w", checkpointd.ErrNotFound)
	}
	if err != nil {
		return err
	}
	return &checkpointd.GoneError{Tombstone: row.tombstone()}
}

// bindOf is the bind type of a *sqlx.DB or *sqlx.Tx.
func bindOf(q sqlx.QueryerContext) int {
	if b, ok := q.(interface{ DriverName() string }); ok {
		return sqlx.BindType(b.DriverName())
	}
	return sqlx.QUESTION
}

// Tombstone returns the tombstone of a cleared or pruned session.
// Errors: ErrNotFound (no tombstone: the session exists or never did),
// ErrStoreUnavailable.
func (s *Store) Tombstone(ctx context.Context, sessionID string) (*checkpointd.Tombstone, error) {
	var row tombstoneRow
	err := s.rdb.GetContext(ctx, &row, s.rdb.Rebind(selectTombstone), sessionID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("no tombstone for session %s: %w", sessionID, checkpointd.ErrNotFound)
	}
	if err != nil {
		return nil, s.classify(err)
	}
	return row.tombstone(), nil
}

// ClearSession force-clears a session: it deletes the session with its
// runs, checkpoints, events, leases (freeing the resources of those still
// held) and idempotency keys, and writes its tombstone (kind cleared, by,
// the redacted reason and what was removed), all in one transaction. A
// cleared session no longer counts as active, so it stops blocking a
// drain. Errors: ErrNotFound, *checkpointd.GoneError (ErrGone: already
// cleared or pruned), ErrStoreUnavailable (nothing was removed).
func (s *Store) ClearSession(ctx context.Context, sessionID, by, reason string) (*checkpointd.Tombstone, error) {
	now := s.now()
	var out *checkpointd.Tombstone
	err := s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
		victims, err := lockSessions(ctx, tx, `id = ?`, sessionID)
		if err != nil {
			return err
		}
		if len(victims) == 0 {
			return notFoundOrGone(ctx, tx, sessionID)
		}
		ts, err := s.removeSessions(ctx, tx, victims, checkpointd.TombstoneCleared, by, reason, now, nil)
		if err != nil {
			return err
		}
		out = ts[0]
		return nil
	})
	return out, err
}

// victimRow is a session about to be removed, as its tombstone records it.
type victimRow struct {
	ID        string `db:"id"`
	Repo      string `db:"repo"`
	Role      string `db:"role"`
	State     string `db:"state"`
	CreatedAt int64  `db:"created_at"`
}

// lockSessions locks the sessions matching where (a no-op update takes the
// row locks on both engines), so no write to them commits between what the
// removal counts and what it deletes.
func lockSessions(ctx context.Context, tx *sqlx.Tx, where string, args ...any) ([]victimRow, error) {
	q, args, err := sqlx.In(`UPDATE sessions SET updated_at = updated_at WHERE `+where+
		` RETURNING id, repo, role, state, created_at`, args...)
	if err != nil {
		return nil, err
	}
	var rows []victimRow
	if err := tx.SelectContext(ctx, &rows, tx.Rebind(q), args...); err != nil {
		return nil, err
	}
	return rows, nil
}

// freeSessionResources frees the resources whose grant one of the sessions
// holds, found by primary key: lease_id has no index (the lease code, too,
// finds a grant's resource by its key and then checks the grant).
const freeSessionResources = `UPDATE lease_resources SET lease_id = '', expires_at = 0
WHERE resource_key IN (SELECT resource_key FROM leases WHERE session_id IN (?) AND state = 'held')
AND lease_id IN (SELECT id FROM leases WHERE session_id IN (?) AND state = 'held')`

// removeSessions deletes locked sessions with everything they own and
// writes their tombstones, in the caller's transaction. Resources whose
// grant a removed session still held are freed; their fencing counters are
// kept, so tokens only grow. No other session's validity changes: a
// checkpoint of another session cannot rely on a lease these runs held.
// trimmedEvents, when set, counts events of each session already deleted
// ahead of the removal (pruneEndedSessions), for the tombstone's count.
func (s *Store) removeSessions(ctx context.Context, tx *sqlx.Tx, victims []victimRow, kind checkpointd.TombstoneKind,
	by, reason string, now time.Time, trimmedEvents map[string]int64) ([]*checkpointd.Tombstone, error) {
	ids := make([]string, len(victims))
	for i, v := range victims {
		ids[i] = v.ID
	}
	removed := make(map[string]*checkpointd.Removed, len(ids))
	for _, id := range ids {
		removed[id] = &checkpointd.Removed{Events: trimmedEvents[id]}
	}
	counts := []struct {
		q   string
		add func(r *checkpointd.Removed, n int64)
	}{
		{`SELECT session_id AS k, COUNT(*) AS n FROM checkpoints WHERE session_id IN (?) GROUP BY session_id`,
			func(r *checkpointd.Removed, n int64) { r.Checkpoints = n }},
		{`SELECT session_id AS k, COUNT(*) AS n FROM runs WHERE session_id IN (?) GROUP BY session_id`,
			func(r *checkpointd.Removed, n int64) { r.Runs = n }},
		{`SELECT session_id AS k, COUNT(*) AS n FROM events WHERE session_id IN (?) GROUP BY session_id`,
			func(r *checkpointd.Removed, n int64) { r.Events += n }},
		{`SELECT session_id AS k, COUNT(*) AS n FROM leases WHERE session_id IN (?) GROUP BY session_id`,
			func(r *checkpointd.Removed, n int64) { r.Leases = n }},
		{`SELECT session_id AS k, COUNT(*) AS n FROM leases WHERE session_id IN (?) AND state = 'held' GROUP BY session_id`,
			func(r *checkpointd.Removed, n int64) { r.LeasesReleased = n }},
		{`SELECT scope AS k, COUNT(*) AS n FROM idempotency WHERE scope IN (?) GROUP BY scope`,
			func(r *checkpointd.Removed, n int64) { r.IdempotencyKeys = n }},
	}
	for _, c := range counts {
		var rows []struct {
			K string `db:"k"`
			N int64  `db:"n"`
		}
		if err := selectIn(ctx, tx, &rows, c.q, ids); err != nil {
			return nil, err
		}
		for _, r := range rows {
			c.add(removed[r.K], r.N)
		}
	}
	deletes := []string{
		freeSessionResources,
		`DELETE FROM idempotency WHERE scope IN (?)`,
		`DELETE FROM leases WHERE session_id IN (?)`,
		`DELETE FROM events WHERE session_id IN (?)`,
		`DELETE FROM checkpoints WHERE session_id IN (?)`,
		`DELETE FROM runs WHERE session_id IN (?)`,
		`DELETE FROM sessions WHERE id IN (?)`,
	}
	for _, d := range deletes {
		lists := make([]any, strings.Count(d, "(?)"))
		for i := range lists {
			lists[i] = ids
		}
		q, args, err := sqlx.In(d, lists...)
		if err != nil {
			return nil, err
		}
		if _, err := tx.ExecContext(ctx, tx.Rebind(q), args...); err != nil {
			return nil, err
		}
	}
	out := make([]*checkpointd.Tombstone, len(victims))
	for i, v := range victims {
		t := &checkpointd.Tombstone{SessionID: v.ID, Repo: v.Repo, Role: v.Role, Kind: kind, At: now, By: by, Reason: reason,
			SessionState: checkpointd.SessionState(v.State), SessionCreatedAt: fromMicros(v.CreatedAt), Removed: *removed[v.ID]}
		rm, err := jsonMarshal(t.Removed)
		if err != nil {
			return nil, err
		}
		if _, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO tombstones (session_id, repo, repo_key, role, kind, at, actor,
    reason, session_state, session_created_at, removed) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
			t.SessionID, t.Repo, strings.ToLower(t.Repo), t.Role, string(kind), micros(now), by, reason, v.State, v.CreatedAt, rm); err != nil {
			return nil, err
		}
		out[i] = t
	}
	return out, nil
}
