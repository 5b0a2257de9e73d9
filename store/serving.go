package store

import (
	"context"
	"database/sql/driver"
	"log/slog"
	"time"

	"github.com/checkpointd/checkpointd/migrations"
)

// servingLock names the advisory lock every serving replica holds shared
// for as long as it serves. A replica that starts takes it exclusively
// first: it gets it only when no other replica is serving (a full outage
// ended), and then holds it through its start-up work, so a replica
// starting at the same moment waits for that work and then joins, instead
// of repeating it.
const servingLock = "serving"

// JoinServing registers this process as a serving replica until leave is
// called (or its connection dies). When no other replica was serving it
// runs whenFirst first, with every other starting replica held off, and
// reports first. On SQLite, which has one daemon per file, every start is
// first. Errors: whenFirst's, or ErrStoreUnavailable.
func (s *Store) JoinServing(ctx context.Context, whenFirst func(context.Context) error) (first bool, leave func(), err error) {
	if s.dialect != migrations.Postgres {
		return true, func() {}, whenFirst(ctx)
	}
	conn, err := s.wdb.Connx(ctx)
	if err != nil {
		return false, nil, s.classify(err)
	}
	closeConn := func() {
		// The locks go with the session: a connection back in the pool
		// must not keep them, so it is discarded rather than returned.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		_ = conn.Close()
	}
	if err := conn.GetContext(ctx, &first, `SELECT pg_try_advisory_lock(`+lockSQL+`)`, servingLock); err != nil {
		closeConn()
		return false, nil, s.classify(err)
	}
	if first {
		if err := whenFirst(ctx); err != nil {
			closeConn()
			return false, nil, err
		}
	}
	// Shared from here on; taken before the exclusive lock is let go, so
	// no starting replica ever finds the lock free while this one serves.
	// A replica holding the exclusive lock through its start-up work makes
	// this wait for it.
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock_shared(`+lockSQL+`)`, servingLock); err != nil {
		closeConn()
		return false, nil, s.classify(err)
	}
	if first {
		if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_unlock(`+lockSQL+`)`, servingLock); err != nil {
			closeConn()
			return false, nil, s.classify(err)
		}
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // keeps the connection, and so the lock, alive
		defer close(done)
		t := time.NewTicker(s.exclusiveKeepalive)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if err := conn.PingContext(context.Background()); err != nil {
					// The lock is gone with the connection: a replica
					// starting now resets validity, which errs safe.
					s.log.Warn("lost the connection that marks this replica as serving", slog.Any("err", err))
				}
			}
		}
	}()
	leave = func() {
		close(stop)
		<-done
		closeConn()
	}
	return first, leave, nil
}
