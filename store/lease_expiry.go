package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd"
)

// A lease is lost at its expires_at, whether or not anyone has ended it yet.
// The expiry worker ends leases every few seconds, so that
// the events and validity changes are recorded without waiting for anyone;
// an acquire, renewal or checkpoint write judges by time on its own; and
// Settled, which the API calls before every answer that reports validity
// or leases, first ends the leases whose time ran out (expired), as it
// settles the refs that moved: no answer carries a lease as held, or a
// session as valid on its strength, past the lease's expires_at. The drain decision ends them inside its own
// transaction, at its own instant (decideDrain).

// expireBatch bounds the leases one ExpireLeases call of a read ends.
const expireBatch = 200

const selectOverdue = `SELECT id FROM leases WHERE state = 'held' AND expires_at <= ? ORDER BY expires_at LIMIT ?`

// ExpireLeases ends up to limit held leases whose time ran out, each with its
// event and the validity of sessions that relied on it, and returns how many
// it ended. The lease worker calls it; it is safe to run concurrently.
func (s *Store) ExpireLeases(ctx context.Context, limit int) (int, error) {
	ended, _, err := s.expireLeases(ctx, limit)
	return ended, err
}

// expireLeases is ExpireLeases that also reports how many overdue leases it
// found: those another replica ended meanwhile count as found, not ended.
func (s *Store) expireLeases(ctx context.Context, limit int) (ended, found int, err error) {
	now := s.now()
	var ids []string
	if err := s.rdb.SelectContext(ctx, &ids, s.rdb.Rebind(selectOverdue), micros(now), limit); err != nil {
		return 0, 0, s.classify(err)
	}
	for _, id := range ids {
		var done bool
		err := s.change(ctx, CauseLease, func(ctx context.Context, tx *sqlx.Tx, ch *changes) (err error) {
			done, err = s.expireLease(ctx, tx, ch, id, now)
			return err
		})
		if err != nil {
			return ended, len(ids), err
		}
		if done {
			ended++
		}
	}
	return ended, len(ids), nil
}

// expireLease ends lease id if its time ran out by now, and reports whether
// it did. One renewed, ended or cleared with its session meanwhile is left
// alone.
func (s *Store) expireLease(ctx context.Context, tx *sqlx.Tx, ch *changes, id string, now time.Time) (bool, error) {
	if err := lockLeaseSession(ctx, tx, id, "", now, 0); err != nil {
		return false, err
	}
	l, err := s.getLease(ctx, tx, id)
	if err != nil || l.State != checkpointd.LeaseHeld || l.ExpiresAt.After(now) {
		return false, ignoreNotFound(err)
	}
	err = s.endLease(ctx, tx, ch, l, checkpointd.LeaseExpired, "expired", now)
	if errors.Is(err, errLeaseUnchanged) {
		return false, nil // renewed or ended by another replica meanwhile
	}
	return err == nil, err
}

// overdueProbe finds one held lease whose time ran out, over the partial
// index leases_held_expiry.
const overdueProbe = `SELECT COUNT(*) FROM (SELECT 1 FROM leases WHERE state = 'held' AND expires_at <= ? LIMIT 1) p`

// expired ends every lease whose time ran out (for Settled): when nothing
// is overdue it costs one indexed probe. Readers of one process take turns, so a burst of them
// at the moment a lease runs out waits for one expiry instead of each
// contending for the same rows. Errors: ErrStoreUnavailable (the read must
// not answer from a state it could not bring up to date).
func (s *Store) expired(ctx context.Context) error {
	var n int
	if err := s.rdb.GetContext(ctx, &n, s.rdb.Rebind(overdueProbe), micros(s.now())); err != nil {
		return s.classify(err)
	}
	if n == 0 {
		return nil
	}
	select {
	case s.expiring <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("%w: waiting to expire leases: %w", checkpointd.ErrStoreUnavailable, ctx.Err())
	}
	defer func() { <-s.expiring }()
	for {
		_, found, err := s.expireLeases(ctx, expireBatch)
		if err != nil || found < expireBatch {
			return err
		}
	}
}

// expireOverdue ends, inside tx, every lease whose time ran out by now: a
// decision taken at now then sees each of them lost. Sessions are locked in
// id order, as settles and the drain decision lock them.
func (s *Store) expireOverdue(ctx context.Context, tx *sqlx.Tx, ch *changes, now time.Time) error {
	var ids []string
	if err := tx.SelectContext(ctx, &ids, tx.Rebind(`SELECT id FROM leases WHERE state = 'held' AND expires_at <= ? ORDER BY session_id, id`),
		micros(now)); err != nil {
		return err
	}
	for _, id := range ids {
		if _, err := s.expireLease(ctx, tx, ch, id, now); err != nil {
			return err
		}
	}
	return nil
}
