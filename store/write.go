package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd"
)

// writeFunc is the body of a write transaction. It must use the ctx it is
// given for its statements, not a request's: on SQLite several requests
// share one transaction (group commit), and an interrupted statement would
// roll back the others' work. It must use only tx: on SQLite the writer's
// one connection is busy with tx, so anything else asking for it (a
// Prepare on s.wdb, say) would wait for itself.
type writeFunc func(ctx context.Context, tx *sqlx.Tx) error

// write runs fn in a write transaction and returns once it is durable or
// has failed: every write of the store goes through it (or change, which
// wraps it). On PostgreSQL that is inTx. On SQLite, whose single writer
// pays one fsync per commit, writes queued at the same moment share one
// transaction: each runs inside its own SAVEPOINT, so one that fails rolls
// back alone, and all are answered after the one commit. Nothing is
// acknowledged before that commit.
func (s *Store) write(ctx context.Context, fn writeFunc) error {
	if s.group == nil {
		return s.inTx(ctx, func(tx *sqlx.Tx) error { return fn(ctx, tx) })
	}
	err := s.group.submit(ctx, fn)
	if err == nil {
		s.committed()
	}
	return s.classifyOp(OpWrite, err)
}

// maxGroup bounds a group commit: the first writer of a batch waits for at
// most this many others' statements before its commit.
const maxGroup = 64

// groupCommitter is the SQLite writer goroutine of write.
type groupCommitter struct {
	s    *Store
	jobs chan *groupJob
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

type groupJob struct {
	ctx    context.Context
	fn     writeFunc
	result chan error
}

var errStoreClosed = errors.New("the store is closed")

func newGroupCommitter(s *Store) *groupCommitter {
	g := &groupCommitter{s: s, jobs: make(chan *groupJob), stop: make(chan struct{}), done: make(chan struct{})}
	go g.loop()
	return g
}

// submit hands fn to the writer and waits for its outcome. Once the writer
// took the job, submit waits for the commit even if ctx ends meanwhile: the
// caller must know whether its write landed (an idempotency claim is
// released only after a write that did not).
func (g *groupCommitter) submit(ctx context.Context, fn writeFunc) error {
	j := &groupJob{ctx: ctx, fn: fn, result: make(chan error, 1)}
	select {
	case g.jobs <- j:
	case <-ctx.Done():
		return ctx.Err()
	case <-g.stop:
		return errStoreClosed
	}
	return <-j.result
}

func (g *groupCommitter) close() {
	g.once.Do(func() { close(g.stop) })
	<-g.done
}

func (g *groupCommitter) loop() {
	defer close(g.done)
	for {
		var batch []*groupJob
		select {
		case j := <-g.jobs:
			batch = append(batch, j)
		case <-g.stop:
			return
		}
		// Take whoever is already waiting; never wait for more.
	more:
		for len(batch) < maxGroup {
			select {
			case j := <-g.jobs:
				batch = append(batch, j)
			default:
				break more
			}
		}
		g.run(batch)
	}
}

// run commits a batch. A busy database (another process holding the write
// lock past busy_timeout) is retried as inTx does; every job's body runs
// again from the start, as a retried transaction's would.
func (g *groupCommitter) run(batch []*groupJob) {
	var results []error
	var err error
	for attempt := 0; ; attempt++ {
		results, err = g.try(batch)
		if err == nil || !retryable(err) || attempt == 3 {
			break
		}
	}
	for i, j := range batch {
		if err == nil {
			j.result <- results[i]
		} else {
			j.result <- err
		}
	}
}

// try runs each job in its own savepoint of one transaction and commits.
// It returns each job's own error, or an error for the whole batch.
func (g *groupCommitter) try(batch []*groupJob) (results []error, err error) {
	// The batch's statements are never cancelled: a request that gives up
	// is skipped before its turn, never interrupted inside the shared
	// transaction.
	tx, err := g.s.wdb.BeginTxx(context.Background(), nil)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	results = make([]error, len(batch))
	for i, j := range batch {
		if err := j.ctx.Err(); err != nil {
			results[i] = err
			continue
		}
		ctx := context.WithoutCancel(j.ctx)
		if _, err := tx.ExecContext(ctx, `SAVEPOINT w`); err != nil {
			return nil, err
		}
		if results[i] = runJob(ctx, tx, j.fn); results[i] != nil {
			if _, err := tx.ExecContext(ctx, `ROLLBACK TO w`); err != nil {
				// SQLite aborts the whole transaction on some errors
				// (SQLITE_FULL, IOERR): the savepoint went with it, and
				// the job's error is the cause every job must hear.
				return nil, fmt.Errorf("%w (the transaction was rolled back with it: %v)", results[i], err)
			}
		}
		if _, err := tx.ExecContext(ctx, `RELEASE w`); err != nil {
			return nil, err
		}
	}
	return results, tx.Commit()
}

// runJob turns a panic in one job into that job's error: the writer serves
// every other request and must not die with one.
func runJob(ctx context.Context, tx *sqlx.Tx, fn writeFunc) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("write panicked: %v", p)
		}
	}()
	return fn(ctx, tx)
}

// statements caches prepared statements of the hot paths. A statement is
// prepared on the pool once and bound to a transaction with tx.Stmtx, which
// reuses what each connection already prepared: no parse and plan per call
// on PostgreSQL, no compile per call on SQLite.
type statements struct {
	mu sync.Mutex
	m  map[statementKey]*sqlx.Stmt
}

type statementKey struct {
	db    *sqlx.DB
	query string
}

// prepared returns query prepared on db (s.wdb or s.rdb). Call it outside
// any write transaction: on SQLite the writer has one connection, which a
// transaction of the caller's would hold while Prepare waited for it.
func (s *Store) prepared(ctx context.Context, db *sqlx.DB, query string) (*sqlx.Stmt, error) {
	s.stmts.mu.Lock()
	defer s.stmts.mu.Unlock()
	k := statementKey{db, query}
	if st, ok := s.stmts.m[k]; ok {
		return st, nil
	}
	st, err := db.PreparexContext(ctx, db.Rebind(query))
	if err != nil {
		return nil, err
	}
	if s.stmts.m == nil {
		s.stmts.m = map[statementKey]*sqlx.Stmt{}
	}
	s.stmts.m[k] = st
	return st, nil
}

// closeStatements closes every cached statement.
func (s *Store) closeStatements() error {
	s.stmts.mu.Lock()
	defer s.stmts.mu.Unlock()
	var err error
	for k, st := range s.stmts.m {
		err = errors.Join(err, st.Close())
		delete(s.stmts.m, k)
	}
	return err
}

// change is write for a body whose changes the observer hears of: once
// the transaction committed, it tells the observer what fn changed, by
// cause, and the trackers the moves it made. fn gets its attempt's
// changes, from none: a retried attempt starts again.
func (s *Store) change(ctx context.Context, cause string, fn func(ctx context.Context, tx *sqlx.Tx, ch *changes) error, track ...*Moves) error {
	var ch changes
	err := s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
		ch.reset()
		return fn(ctx, tx, &ch)
	})
	if err == nil {
		s.tell(cause, &ch, track...)
	}
	return err
}

// inTx runs fn in a write transaction, rolls back on error or panic and
// returns the commit error. A transaction refused for contention
// (serialization failure, deadlock, lock timeout, SQLite busy) is tried
// again after a jittered backoff, up to maxTxAttempts, then answered as
// ErrContended; one whose connection broke before its commit (a pooled
// connection the server ended) is tried again at once on another, up to
// maxConnAttempts. A connection that breaks at the commit is not retried:
// whether it committed is unknown. Each retry is counted (Observer).
// fn runs again from the start on each attempt: what it collects for the
// observer (changes) it resets first.
func (s *Store) inTx(ctx context.Context, fn func(tx *sqlx.Tx) error) (err error) {
	for attempt := 1; ; attempt++ {
		err = s.tryTx(ctx, fn)
		if err == nil {
			s.committed()
			return nil
		}
		why := retryReason(err)
		switch {
		case why == "":
			return s.classifyOp(OpWrite, err)
		case why == RetryConflict && attempt >= maxTxAttempts:
			return fmt.Errorf("%w: the database refused the change %d times for concurrent changes of the same rows; nothing was changed: %w",
				checkpointd.ErrContended, attempt, err)
		case why == RetryConnection && attempt >= maxConnAttempts:
			return s.classifyOp(OpWrite, err)
		}
		if s.obs != nil {
			s.obs.StoreRetry(why)
		}
		if why == RetryConnection {
			s.dropIdleConns()
		}
		if why == RetryConflict {
			if werr := sleepCtx(ctx, txBackoff(attempt)); werr != nil {
				return s.classifyOp(OpWrite, err)
			}
		}
	}
}

// dropIdleConns closes the pool's idle connections: one the server ended
// means the others it held idle were most likely ended with it (a restart,
// a failover, pg_terminate_backend), and each would otherwise cost an
// attempt of its own — more dead connections than attempts made a write
// fail after the server was back. Connections in use are left alone.
func (s *Store) dropIdleConns() {
	if s.idleConns > 0 {
		s.wdb.SetMaxIdleConns(0)
		s.wdb.SetMaxIdleConns(s.idleConns)
	}
}

// Retry bounds of inTx.
const (
	maxTxAttempts   = 8
	maxConnAttempts = 3
)

// Reasons a transaction is tried again (Observer.StoreRetry).
const (
	RetryConflict   = "conflict"
	RetryConnection = "connection"
)

// txBackoff is the wait before the attempt after attempt: doubling from
// 2 ms to at most 100 ms, half of it random, so that the transactions that
// conflicted do not meet again (about 0.3 s over every attempt).
func txBackoff(attempt int) time.Duration {
	d := min(2*time.Millisecond<<(attempt-1), 100*time.Millisecond)
	return d/2 + rand.N(d/2+1)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// commitError is a failed COMMIT: the transaction may or may not have
// committed.
type commitError struct{ err error }

func (e commitError) Error() string { return "commit: " + e.err.Error() }
func (e commitError) Unwrap() error { return e.err }

func (s *Store) tryTx(ctx context.Context, fn func(tx *sqlx.Tx) error) (err error) {
	tx, err := s.wdb.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if p := recover(); p != nil {
			tx.Rollback()
			panic(p)
		}
		if err != nil {
			tx.Rollback()
		}
	}()
	if err = fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return commitError{err}
	}
	return nil
}
