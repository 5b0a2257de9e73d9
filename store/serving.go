package store

import (
	"context"
	"database/sql/driver"
	"fmt"
	"log/slog"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd/migrations"
)

// servingLock names the advisory lock every serving replica holds shared
// for as long as it serves. A replica that starts tries it exclusively: it
// gets it only when no other replica is serving (a full outage ended), and
// then does its start-up work.
const servingLock = "serving"

// joiningLock lets replicas start one at a time (joinServing).
const joiningLock = "joining"

// servingIdlePings is how many keepalive intervals without a ping end the
// lock's session on the server (a host that died without closing the
// connection), so the lock does not outlive the replica by the hours TCP
// would take to notice: 20 s by default.
const servingIdlePings = 4

// JoinServing registers this process as a serving replica until leave is
// called. When no other replica was serving it runs whenFirst first, with
// every other starting replica held off, and reports first. If the
// replica that ran whenFirst failed before finishing it, a replica that was
// waiting runs it in turn. A lock lost with its connection (the database
// restarted) is taken again, shared: the replica was serving all along. On
// SQLite, which has one daemon per file, every start is first.
// Errors: whenFirst's, or ErrStoreUnavailable.
func (s *Store) JoinServing(ctx context.Context, whenFirst func(context.Context) error) (first bool, leave func(), err error) {
	if s.dialect != migrations.Postgres {
		return true, func() {}, whenFirst(ctx)
	}
	conn, first, err := s.joinServing(ctx, whenFirst)
	if err != nil {
		return false, nil, err
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(s.exclusiveKeepalive)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			pctx, cancel := context.WithTimeout(context.Background(), s.exclusiveKeepalive)
			err := conn.PingContext(pctx)
			cancel()
			if err == nil {
				continue
			}
			s.log.Warn("lost the connection that marks this replica as serving; taking the lock again", slog.Any("err", err))
			discard(conn)
			for {
				jctx, cancel := context.WithTimeout(context.Background(), s.exclusiveKeepalive)
				conn, err = s.holdServing(jctx)
				cancel()
				if err == nil {
					break
				}
				select {
				case <-stop:
					return
				case <-t.C:
				}
			}
		}
	}()
	leave = func() {
		close(stop)
		select {
		case <-done: // a ping on a dead network may not return: not waited for
		case <-time.After(2 * s.exclusiveKeepalive):
			return
		}
		if conn != nil {
			discard(conn)
		}
	}
	return first, leave, nil
}

// joinServing takes the lock: exclusively to run whenFirst when nobody
// serves, then shared. Starts take turns on a second lock (joiningLock),
// so the test "nobody serves" and the work it decides on are one step: a
// start waiting its turn behind a replica whose start-up work failed (and
// whose locks went with its connection) finds nobody serving, and does the
// work itself.
func (s *Store) joinServing(ctx context.Context, whenFirst func(context.Context) error) (*sqlx.Conn, bool, error) {
	conn, err := s.servingConn(ctx)
	if err != nil {
		return nil, false, err
	}
	fail := func(err error) (*sqlx.Conn, bool, error) {
		discard(conn)
		return nil, false, err
	}
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock(`+lockSQL+`)`, joiningLock); err != nil {
		return fail(s.classify(err))
	}
	var first bool
	if err := conn.GetContext(ctx, &first, `SELECT pg_try_advisory_lock(`+lockSQL+`)`, servingLock); err != nil {
		return fail(s.classify(err))
	}
	if first {
		if err := whenFirst(ctx); err != nil {
			return fail(err)
		}
	}
	// Shared from here on, taken before the exclusive lock is let go.
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock_shared(`+lockSQL+`)`, servingLock); err != nil {
		return fail(s.classify(err))
	}
	if first {
		if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_unlock(`+lockSQL+`)`, servingLock); err != nil {
			return fail(s.classify(err))
		}
	}
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_unlock(`+lockSQL+`)`, joiningLock); err != nil {
		return fail(s.classify(err))
	}
	s.expireWhenSilent(ctx, conn) // not before: whenFirst may take longer than the timeout
	return conn, first, nil
}

// holdServing takes the lock shared again on a new connection.
func (s *Store) holdServing(ctx context.Context) (*sqlx.Conn, error) {
	conn, err := s.servingConn(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock_shared(`+lockSQL+`)`, servingLock); err != nil {
		discard(conn)
		return nil, s.classify(err)
	}
	s.expireWhenSilent(ctx, conn)
	return conn, nil
}

// servingConn is a connection of its own for the lock.
func (s *Store) servingConn(ctx context.Context) (*sqlx.Conn, error) {
	conn, err := s.wdb.Connx(ctx)
	if err != nil {
		return nil, s.classify(err)
	}
	return conn, nil
}

// expireWhenSilent has the server end the lock's session when its pings
// stop (a host that died without closing the connection), once the
// replica serves and pings. idle_session_timeout exists from PostgreSQL
// 14; without it a dead host's lock lasts until TCP gives up, which errs
// towards keeping validity (the next start does not reset).
func (s *Store) expireWhenSilent(ctx context.Context, conn *sqlx.Conn) {
	idle := servingIdlePings * s.exclusiveKeepalive
	if _, err := conn.ExecContext(ctx, fmt.Sprintf(`SET idle_session_timeout = %d`, idle.Milliseconds())); err != nil {
		s.log.Debug("idle_session_timeout not set on the serving lock's connection", slog.Any("err", err))
	}
}

// discardWait bounds how long discard waits for the database.
const discardWait = 5 * time.Second

// discard lets go of a lock connection's locks and closes it for good. The
// locks would go with the session anyway, but the server ends a session a
// moment after its client hung up: unlocking first makes leaving take
// effect before it returns. A connection back in the pool must not keep
// them, so it is not returned there. On a dead network the driver may not
// return at all: discard then gives up waiting after discardWait and
// leaves the closing to the driver.
func discard(conn *sqlx.Conn) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), discardWait)
		defer cancel()
		_, _ = conn.ExecContext(ctx, `SELECT pg_advisory_unlock_all()`)
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		_ = conn.Close()
	}()
	select {
	case <-done:
	case <-time.After(discardWait):
	}
}
