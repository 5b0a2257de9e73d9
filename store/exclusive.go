package store

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/checkpointd/checkpointd/migrations"
)

// Background work (lease expiry, reconcile, retention) runs in one replica
// at a time. On PostgreSQL each kind of work has a session
// advisory lock, keyed by its name and the schema, held on a connection of
// its own for as long as the work runs; a replica that does not get it
// tries again every exclusiveRetry. The lock goes with its connection: if
// the connection dies the work is cancelled within exclusiveKeepalive,
// and another replica takes over. Every step of the work is an atomic,
// conditional transaction, so the short overlap this can allow is safe;
// the lock is about not doing the work N times, not about correctness.
// SQLite has one process: the work just runs.
const (
	exclusiveRetry     = 5 * time.Second
	exclusiveKeepalive = 5 * time.Second
)

// lockSQL derives the lock's 64-bit key from the schema and the name, so
// tests (a schema each) and several deployments on one database never
// share a lock.
const lockSQL = `hashtextextended(current_schema() || ':checkpointd:' || $1, 0)`

// every runs pass every d until ctx ends, and returns nil then: the loop
// of each periodic pass (RunSettle, RunUnresponsive, RunResetWrittenBefore).
func every(ctx context.Context, d time.Duration, pass func(ctx context.Context)) error {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			pass(ctx)
		}
	}
}

// RunExclusive runs fn whenever this process holds the lock of name, until
// ctx ends. fn must return when its ctx ends. It returns nil when ctx ends.
func (s *Store) RunExclusive(ctx context.Context, name string, fn func(ctx context.Context) error) error {
	if s.dialect != migrations.Postgres {
		return fn(ctx)
	}
	for {
		held, err := s.runLocked(ctx, name, fn)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			s.log.Warn("background work stopped", slog.String("work", name), slog.Any("err", err))
		} else if held {
			s.log.Info("background work handed over", slog.String("work", name))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(s.exclusiveRetry):
		}
	}
}

// runLocked runs fn if it gets the lock, and reports whether it did.
func (s *Store) runLocked(ctx context.Context, name string, fn func(ctx context.Context) error) (held bool, err error) {
	conn, err := s.wdb.Connx(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	if err := conn.GetContext(ctx, &held, `SELECT pg_try_advisory_lock(`+lockSQL+`)`, name); err != nil || !held {
		return false, err
	}
	defer func() {
		// A connection that died took the lock with it; one that lives
		// goes back to the pool and must not keep it.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, _ = conn.ExecContext(uctx, `SELECT pg_advisory_unlock(`+lockSQL+`)`, name)
	}()
	s.log.Info("background work started in this replica", slog.String("work", name))
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- fn(wctx) }()
	tick := time.NewTicker(s.exclusiveKeepalive)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return true, err
		case <-tick.C:
			if err := conn.PingContext(ctx); err != nil && ctx.Err() == nil {
				cancel()
				<-done
				return true, fmt.Errorf("lost the connection holding the lock: %w", err)
			}
		}
	}
}
