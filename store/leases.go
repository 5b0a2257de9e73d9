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

// LeaseHeldError is ErrLeaseHeld with the holder, so a 409 can name it.
type LeaseHeldError struct{ Lease *checkpointd.Lease }

func (e *LeaseHeldError) Error() string {
	return fmt.Sprintf("%v: held by session %s until %s", checkpointd.ErrLeaseHeld, e.Lease.Holder.SessionID, e.Lease.ExpiresAt.Format(time.RFC3339))
}
func (e *LeaseHeldError) Unwrap() error { return checkpointd.ErrLeaseHeld }

// NewLease is what acquiring a lease needs; the API validated it.
type NewLease struct {
	Resource  checkpointd.Resource
	SessionID string
	RunID     string
	TTL       time.Duration
	// InScope, when set, must accept the session's repo, checked before
	// anything else is answered (the run, the session's end, the resource).
	InScope func(repo string) bool
}

// lockRun locks an active session for its current run (an update takes the
// row lock on both engines) and records that the run was heard from, in
// the same statement (moving run_seen_at only when it lags by more than
// checkpointd.SeenRefresh, as a checkpoint write does, so its index rarely
// changes; the UPDATE locks the row either way). It answers why not when
// the run may not act.
const lockRun = `
UPDATE sessions SET run_seen_at = CASE WHEN run_seen_at < ? THEN ? ELSE run_seen_at END
WHERE id = ? AND state = 'active' AND current_run_id = ? AND current_run_id <> ''
RETURNING repo`

// claimResource grants the resource to a new lease when it is free, or when
// its grant expired, in one statement on both engines: the database, not a
// read-then-write, decides the single winner. The token only ever grows.
const claimResource = `
INSERT INTO lease_resources (resource_key, fencing_token, lease_id, expires_at) VALUES (?, 1, ?, ?)
ON CONFLICT (resource_key) DO UPDATE SET
    fencing_token = lease_resources.fencing_token + 1,
    lease_id = excluded.lease_id,
    expires_at = excluded.expires_at
WHERE lease_resources.lease_id = '' OR lease_resources.expires_at <= ?
RETURNING fencing_token`

// A grant's resource row is found by its key (the primary key) and then
// checked to still carry the grant: lease_id has no index.
const (
	renewResource = `UPDATE lease_resources SET expires_at = ? WHERE resource_key = ? AND lease_id = ?`
	freeResource  = `UPDATE lease_resources SET lease_id = '', expires_at = 0 WHERE resource_key = ? AND lease_id = ?`
	bumpResource  = `UPDATE lease_resources SET fencing_token = fencing_token + 1
WHERE resource_key = ? AND lease_id = ? RETURNING fencing_token`
)

const insertLease = `
INSERT INTO leases (id, resource_key, kind, repo, repo_key, number, branch, session_id, run_id,
    fencing_token, state, acquired_at, expires_at, term)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'held', ?, ?, ?)`

// AcquireLease grants a resource to a session's current run for ttl.
// Errors: ErrNotFound, ErrForbidden (out of InScope, before any other),
// ErrSessionEnded, ErrRunSuperseded, ErrInvalidRequest (a resource of another repo than the session's),
// *LeaseHeldError (ErrLeaseHeld), ErrStoreUnavailable.
func (s *Store) AcquireLease(ctx context.Context, in NewLease) (*checkpointd.Lease, error) {
	now := s.now()
	key := in.Resource.Key()
	l := &checkpointd.Lease{ID: checkpointd.NewID(checkpointd.PrefixLease), Resource: in.Resource,
		Holder: checkpointd.LeaseHolder{SessionID: in.SessionID, RunID: in.RunID}, State: checkpointd.LeaseHeld,
		AcquiredAt: now, ExpiresAt: now.Add(in.TTL).Truncate(time.Microsecond), TTLSeconds: int64(in.TTL / time.Second)}
	err := s.change(ctx, CauseLease, func(ctx context.Context, tx *sqlx.Tx, ch *changes) error {
		var repo string
		err := tx.QueryRowxContext(ctx, tx.Rebind(lockRun), micros(now.Add(-checkpointd.SeenRefresh(s.liveness()))), micros(now), in.SessionID, in.RunID).Scan(&repo)
		if errors.Is(err, sql.ErrNoRows) {
			return s.refusedRun(ctx, tx, in.SessionID, in.RunID, 0, in.InScope)
		}
		if err != nil {
			return err
		}
		if in.InScope != nil && !in.InScope(repo) {
			return checkpointd.OutOfScope()
		}
		if !strings.EqualFold(repo, in.Resource.Repo) {
			return checkpointd.Invalid("/resource/repo", "a session leases resources of its own repo only ("+repo+")")
		}
		// A grant that expired but was not yet reaped ends here, with its
		// event, before the resource passes on.
		if err := s.reapResource(ctx, tx, ch, key, now); err != nil {
			return err
		}
		err = tx.QueryRowxContext(ctx, tx.Rebind(claimResource), key, l.ID, micros(l.ExpiresAt), micros(now)).Scan(&l.FencingToken)
		if errors.Is(err, sql.ErrNoRows) {
			holder, herr := s.heldLease(ctx, tx, key)
			if herr != nil {
				return herr
			}
			return &LeaseHeldError{Lease: holder}
		}
		if err != nil {
			return err
		}
		r := in.Resource
		if _, err := tx.ExecContext(ctx, tx.Rebind(insertLease), l.ID, key, string(r.Kind), r.Repo, strings.ToLower(r.Repo),
			r.Number, r.Branch, in.SessionID, in.RunID, l.FencingToken, micros(now), micros(l.ExpiresAt), in.TTL.Microseconds()); err != nil {
			return err
		}
		ch.lease(checkpointd.EventLeaseAcquired)
		return appendEvent(ctx, tx, in.SessionID, now, checkpointd.EventLeaseAcquired, in.RunID,
			map[string]any{"lease_id": l.ID, "resource": r, "fencing_token": l.FencingToken, "expires_at": l.ExpiresAt})
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// lockLeaseSession locks the row of the session holding lease id, first.
// Every transaction that touches a session and its leases (a checkpoint
// write, a takeover, an acquisition, a force-clear, and so renewals,
// releases and expiries too) takes the session row before any lease row,
// so two of them wait for each other instead of deadlocking. When runID
// is the session's current run, the same statement records that it was
// heard from at now (renewals and releases cost no extra write), when the
// recorded sighting lags by more than refresh (checkpointd.SeenRefresh);
// the transaction rolls the sighting back with a refused call.
func lockLeaseSession(ctx context.Context, tx *sqlx.Tx, leaseID, runID string, now time.Time, refresh time.Duration) error {
	_, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE sessions
SET run_seen_at = CASE WHEN current_run_id = ? AND current_run_id <> '' AND run_seen_at < ? THEN ? ELSE run_seen_at END
WHERE id = (SELECT session_id FROM leases WHERE id = ?)`), runID, micros(now.Add(-refresh)), micros(now), leaseID)
	return err
}

// RenewLease extends a held lease by ttl from now, for its holding run only.
// Errors: ErrNotFound, ErrLeaseLost (not held by runID, or expired),
// ErrStoreUnavailable.
func (s *Store) RenewLease(ctx context.Context, id, runID string, ttl time.Duration) (*checkpointd.Lease, error) {
	now := s.now()
	expires := now.Add(ttl).Truncate(time.Microsecond)
	var out *checkpointd.Lease
	err := s.change(ctx, CauseLease, func(ctx context.Context, tx *sqlx.Tx, ch *changes) error {
		if err := lockLeaseSession(ctx, tx, id, runID, now, checkpointd.SeenRefresh(s.liveness())); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE leases SET expires_at = ?, term = ? WHERE id = ? AND run_id = ? AND state = 'held' AND expires_at > ?`),
			micros(expires), ttl.Microseconds(), id, runID, micros(now))
		if err != nil {
			return err
		}
		l, err := s.getLease(ctx, tx, id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return lostBecause(l, runID, now)
		}
		if _, err := tx.ExecContext(ctx, tx.Rebind(renewResource),
			micros(expires), l.Resource.Key(), id); err != nil {
			return err
		}
		out = l
		ch.lease(checkpointd.EventLeaseRenewed)
		return appendEvent(ctx, tx, l.Holder.SessionID, now, checkpointd.EventLeaseRenewed, runID,
			map[string]any{"lease_id": id, "expires_at": expires})
	})
	return out, err
}

// ReleaseLease ends a held lease. The holder's run may release it while it
// is in force; an operator (force) may release any held lease.
// Errors: ErrNotFound, ErrLeaseLost, ErrStoreUnavailable.
func (s *Store) ReleaseLease(ctx context.Context, id, runID string, force bool) error {
	now := s.now()
	return s.change(ctx, CauseLease, func(ctx context.Context, tx *sqlx.Tx, ch *changes) error {
		if err := lockLeaseSession(ctx, tx, id, runID, now, checkpointd.SeenRefresh(s.liveness())); err != nil {
			return err
		}
		l, err := s.getLease(ctx, tx, id)
		if err != nil {
			return err
		}
		if !force && (l.Holder.RunID != runID || !l.HeldAt(now)) {
			return lostBecause(l, runID, now)
		}
		if l.State != checkpointd.LeaseHeld {
			return lostBecause(l, runID, now)
		}
		cause := "released"
		if force {
			cause = "force_released"
		}
		if err := s.endLease(ctx, tx, ch, l, checkpointd.LeaseReleased, cause, now); errors.Is(err, errLeaseUnchanged) {
			return fmt.Errorf("%w: the lease ended meanwhile", checkpointd.ErrLeaseLost)
		} else if err != nil {
			return err
		}
		return nil
	})
}

// endLease ends a held grant, frees its resource, records the event and
// re-judges the holder session's validity.
//
// The update re-checks the grant under its row lock: a grant renewed (or
// ended) since the caller read it is left alone and errLeaseUnchanged says
// so, so a racing renewal is never undone and an end is recorded once.
func (s *Store) endLease(ctx context.Context, tx *sqlx.Tx, ch *changes, l *checkpointd.Lease, state checkpointd.LeaseState, cause string, now time.Time) error {
	q, args := `UPDATE leases SET state = ?, ended_at = ? WHERE id = ? AND state = 'held'`, []any{string(state), micros(now), l.ID}
	if state == checkpointd.LeaseExpired {
		q, args = q+` AND expires_at <= ?`, append(args, micros(now))
	}
	res, err := tx.ExecContext(ctx, tx.Rebind(q), args...)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errLeaseUnchanged
	}
	if _, err := tx.ExecContext(ctx, tx.Rebind(freeResource),
		l.Resource.Key(), l.ID); err != nil {
		return err
	}
	kind := checkpointd.EventLeaseReleased
	if state == checkpointd.LeaseExpired {
		kind = checkpointd.EventLeaseExpired
	}
	ch.lease(kind)
	if err := appendEvent(ctx, tx, l.Holder.SessionID, now, kind, l.Holder.RunID,
		map[string]any{"lease_id": l.ID, "resource": l.Resource, "fencing_token": l.FencingToken, "cause": cause}); err != nil {
		return err
	}
	return rejudgeLeases(ctx, tx, ch, l.Holder.SessionID, l.ID, now, cause)
}

// errLeaseUnchanged reports that a grant was no longer in the state its
// ender read: renewed, or ended by someone else meanwhile.
var errLeaseUnchanged = errors.New("lease changed meanwhile")

func lostBecause(l *checkpointd.Lease, runID string, now time.Time) error {
	switch {
	case l.State != checkpointd.LeaseHeld:
		return fmt.Errorf("%w: the lease was %s", checkpointd.ErrLeaseLost, l.State)
	case !l.HeldAt(now):
		return fmt.Errorf("%w: the lease expired at %s", checkpointd.ErrLeaseLost, l.ExpiresAt.Format(time.RFC3339))
	case l.Holder.RunID != runID:
		return fmt.Errorf("%w: the lease is held by another run", checkpointd.ErrLeaseLost)
	}
	return checkpointd.ErrLeaseLost
}

// reapResource expires the resource's grant if its time ran out.
func (s *Store) reapResource(ctx context.Context, tx *sqlx.Tx, ch *changes, key string, now time.Time) error {
	var id string
	err := tx.GetContext(ctx, &id, tx.Rebind(`SELECT lease_id FROM lease_resources WHERE resource_key = ? AND lease_id <> '' AND expires_at <= ?`), key, micros(now))
	if err != nil {
		return ignoreNoRows(err)
	}
	l, err := s.getLease(ctx, tx, id)
	if err != nil {
		return err
	}
	if err := s.endLease(ctx, tx, ch, l, checkpointd.LeaseExpired, "expired", now); !errors.Is(err, errLeaseUnchanged) {
		return err
	}
	return nil // renewed meanwhile: still held, the claim below fails
}

// moveLeases hands a session's held leases to its new run on takeover, each
// with a new fencing token, in the takeover's transaction.
func (s *Store) moveLeases(ctx context.Context, tx *sqlx.Tx, ch *changes, sessionID, oldRun, newRun string, now time.Time) ([]checkpointd.Lease, error) {
	var held []leaseRow
	if err := tx.SelectContext(ctx, &held, tx.Rebind(selectLease+` WHERE session_id = ? AND state = 'held' AND expires_at > ? ORDER BY id`), sessionID, micros(now)); err != nil {
		return nil, err
	}
	moved := make([]checkpointd.Lease, 0, len(held))
	for _, r := range held {
		l := r.lease()
		var token int64
		if err := tx.QueryRowxContext(ctx, tx.Rebind(bumpResource), l.Resource.Key(), r.ID).Scan(&token); err != nil {
			return nil, err
		}
		if _, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE leases SET run_id = ?, fencing_token = ? WHERE id = ?`), newRun, token, r.ID); err != nil {
			return nil, err
		}
		ch.lease(checkpointd.EventLeaseMoved)
		if err := appendEvent(ctx, tx, sessionID, now, checkpointd.EventLeaseMoved, newRun,
			map[string]any{"lease_id": r.ID, "from_run": oldRun, "fencing_token": token}); err != nil {
			return nil, err
		}
		l.Holder.RunID, l.FencingToken = newRun, token
		moved = append(moved, *l)
	}
	return moved, nil
}

// releaseSessionLeases ends every held lease of a session that ends.
func (s *Store) releaseSessionLeases(ctx context.Context, tx *sqlx.Tx, ch *changes, sessionID string, now time.Time) error {
	var held []leaseRow
	if err := tx.SelectContext(ctx, &held, tx.Rebind(selectLease+` WHERE session_id = ? AND state = 'held' ORDER BY id`), sessionID); err != nil {
		return err
	}
	for _, r := range held {
		if err := s.endLease(ctx, tx, ch, r.lease(), checkpointd.LeaseReleased, "session_ended", now); err != nil && !errors.Is(err, errLeaseUnchanged) {
			return err
		}
	}
	return nil
}

// heldByRun returns the leases a run holds at now, id → fencing token: what
// completeness checks a checkpoint's named leases against.
func heldByRun(ctx context.Context, q sqlx.ExtContext, runID string, now time.Time) (map[string]int64, error) {
	var rows []struct {
		ID    string `db:"id"`
		Token int64  `db:"fencing_token"`
	}
	if err := sqlx.SelectContext(ctx, q, &rows, q.Rebind(`SELECT id, fencing_token FROM leases WHERE run_id = ? AND state = 'held' AND expires_at > ?`), runID, micros(now)); err != nil {
		return nil, err
	}
	held := make(map[string]int64, len(rows))
	for _, r := range rows {
		held[r.ID] = r.Token
	}
	return held, nil
}

// releaseRefLeases releases the leases of a ref that ended: the PR's leases
// when it closed or merged, the branch's when it was deleted.
func (s *Store) releaseRefLeases(ctx context.Context, tx *sqlx.Tx, ch *changes, repoKey string, o checkpointd.Observation, now time.Time, eff *checkpointd.ObservationEffects) error {
	res := checkpointd.Resource{Kind: checkpointd.ResourceBranch, Repo: repoKey, Branch: o.Branch}
	if o.PR > 0 {
		res = checkpointd.Resource{Kind: checkpointd.ResourcePR, Repo: repoKey, Number: o.PR}
	}
	var id string
	err := tx.GetContext(ctx, &id, tx.Rebind(`SELECT lease_id FROM lease_resources WHERE resource_key = ? AND lease_id <> ''`), res.Key())
	if err != nil {
		return ignoreNoRows(err)
	}
	l, err := s.getLease(ctx, tx, id)
	if err != nil {
		return err
	}
	if err := s.endLease(ctx, tx, ch, l, checkpointd.LeaseReleased, "ref_"+string(o.End), now); err != nil {
		if errors.Is(err, errLeaseUnchanged) {
			return nil
		}
		return err
	}
	eff.LeasesReleased++
	return nil
}

// rejudgeLeases re-judges a session after one of its leases ended: if the
// latest checkpoint names that lease, the session has lost it.
func rejudgeLeases(ctx context.Context, tx *sqlx.Tx, ch *changes, sessionID, leaseID string, at time.Time, cause string) error {
	var row struct {
		Validity string `db:"validity"`
		Reason   string `db:"validity_reason"`
		Document string `db:"document"`
	}
	err := tx.GetContext(ctx, &row, tx.Rebind(`
SELECT s.validity, s.validity_reason, COALESCE(c.document, '{}') AS document
FROM sessions s LEFT JOIN checkpoints c ON c.session_id = s.id AND c.seq = s.checkpoint_seq
WHERE s.id = ? AND s.state = 'active'`), sessionID)
	if err != nil {
		return ignoreNoRows(err)
	}
	var doc checkpointd.Document
	if err := jsonUnmarshal(row.Document, &doc); err != nil {
		return err
	}
	named := false
	for _, l := range doc.Leases {
		named = named || l.LeaseID == leaseID
	}
	if !named {
		return nil
	}
	if _, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE sessions SET leases_ok = FALSE WHERE id = ?`), sessionID); err != nil {
		return err
	}
	current := checkpointd.Verdict{Validity: checkpointd.Validity(row.Validity), Reason: row.Reason}
	next, changed := checkpointd.Rejudge(current, checkpointd.ValidityEvidence{LeasesHeld: false})
	if !changed {
		return nil
	}
	return recordVerdict(ctx, tx, ch, sessionID, at, current, next, map[string]any{"lease_id": leaseID, "cause": cause})
}
