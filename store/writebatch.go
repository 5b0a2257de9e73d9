package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
)

// The one-statement writes of several sessions share a call (PostgreSQL).
// A commit costs PostgreSQL far more than the rows it writes: at 16
// writers the daemon's statement alone cost ~700 µs of PostgreSQL's CPU
// per write, eight of them in one call of checkpointd_write_checkpoints
// (migration 00025) ~300 µs each. So, as the SQLite writer does
// (groupCommitter), the writes that arrive while a call is at the database
// go together in the next one. A write that finds no call in flight is
// sent at once, alone; while calls are in flight the next one waits for a
// few more writes (pipelineMin) or for a call to return.
//
// Each write is still its own call of checkpointd_write_checkpoint, in a
// subtransaction of its own: a decline or failure rolls back that write
// alone and it is answered by the full transaction, as before. A call the
// database refuses as a whole is rolled back whole, and each of its writes
// is answered by the transaction too; a call whose outcome is unknown (the
// connection lost) fails every write in it, as one statement's did. Every
// write of a call is answered only once the call returned, after its
// commit.

const callWriteCheckpoints = `SELECT n, validity, declined FROM checkpointd_write_checkpoints(
    $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15,
    $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29,
    $30, $31, $32, $33, $34, $35, $36, $37)`

// maxBatchWrites bounds one call; more waiting writes take the next.
const maxBatchWrites = 32

// writeBatchTimeout bounds one call, when the database still answers (the
// cancel is a request to it). The call is not cancelled by the requests
// in it: once a write is sent its caller waits for the outcome, since it
// must know whether the write landed (a claim is released only after a
// write that did not).
const writeBatchTimeout = 30 * time.Second

// writeBatchRunners is how many calls may be at the database at once: one
// per two cores of this host, at least two (so one call is assembled, or
// sent, while another commits), at most eight.
var writeBatchRunners = min(max(runtime.GOMAXPROCS(0)/2, 2), 8)

// pipelineMin is the fewest writes a call takes while another is at the
// database: a runner overlaps another's commit with a call worth making,
// not with one write (on the 2-core machine of docs/performance.md, two
// runners without it cost PostgreSQL a fifth more per write than one, and
// were no faster; with it, faster than one).
const pipelineMin = 4

// errBatchUnprepared is a call that could not be prepared (no function: a
// schema older than this binary; the database away). Nothing was sent.
var errBatchUnprepared = errors.New("the batched checkpoint write is not prepared")

// errBatchRolledBack is a call the database refused with an error (the
// statement cancelled at writeBatchTimeout, a conflict, a guard of 00025):
// its transaction rolled back, nothing of it landed, and each of its
// writes may run again alone.
var errBatchRolledBack = errors.New("the batched checkpoint write was rolled back")

// rolledBack reports an error of the statement itself, severity ERROR: an
// autocommit statement that fails so is rolled back whole. Anything else
// (the connection lost, which lib/pq reports as a bad connection, as it
// does FATAL; a server whose messages are not in English) leaves its
// outcome unknown.
func rolledBack(err error) bool {
	var pe *pq.Error
	return errors.As(err, &pe) && pe.Severity == "ERROR"
}

// statementWrite is one write's arguments of checkpointd_write_checkpoint,
// in its order. Where it takes a NULL for "none" this holds the zero
// value, which never means anything else there (00025 turns it back).
type statementWrite struct {
	session, run                     string
	token                            int64
	repo, role                       string
	seq, now, seenBefore, pr         int64
	branch, worktree, head           string
	stage, waitingOn, nextActor      string
	leaseIDs                         []string
	leaseTokens                      []int64
	complete                         bool
	missing, wsBranch, digest        string
	redactions                       int64
	document, sealed, documentDigest string
	eventKind, eventData, repoKey    string
	validity, reason, liveRef        string
	liveVersion                      int64
	idemScope, idemKey, idemClaim    string
	idemStatus                       int64
	idemResponse                     string
}

// columns are the arguments of one call for writes, in their order: one
// array per argument.
func columns(writes []*statementWrite) []any {
	n := len(writes)
	text := func(f func(w *statementWrite) string) pq.StringArray {
		c := make(pq.StringArray, n)
		for i, w := range writes {
			c[i] = f(w)
		}
		return c
	}
	number := func(f func(w *statementWrite) int64) pq.Int64Array {
		c := make(pq.Int64Array, n)
		for i, w := range writes {
			c[i] = f(w)
		}
		return c
	}
	complete := make(pq.BoolArray, n)
	for i, w := range writes {
		complete[i] = w.complete
	}
	return []any{
		text(func(w *statementWrite) string { return w.session }),
		text(func(w *statementWrite) string { return w.run }),
		number(func(w *statementWrite) int64 { return w.token }),
		text(func(w *statementWrite) string { return w.repo }),
		text(func(w *statementWrite) string { return w.role }),
		number(func(w *statementWrite) int64 { return w.seq }),
		number(func(w *statementWrite) int64 { return w.now }),
		number(func(w *statementWrite) int64 { return w.seenBefore }),
		number(func(w *statementWrite) int64 { return w.pr }),
		text(func(w *statementWrite) string { return w.branch }),
		text(func(w *statementWrite) string { return w.worktree }),
		text(func(w *statementWrite) string { return w.head }),
		text(func(w *statementWrite) string { return w.stage }),
		text(func(w *statementWrite) string { return w.waitingOn }),
		text(func(w *statementWrite) string { return w.nextActor }),
		text(func(w *statementWrite) string { return arrayLiteral(pq.StringArray(w.leaseIDs)) }),
		text(func(w *statementWrite) string { return arrayLiteral(pq.Int64Array(w.leaseTokens)) }),
		complete,
		text(func(w *statementWrite) string { return w.missing }),
		text(func(w *statementWrite) string { return w.wsBranch }),
		text(func(w *statementWrite) string { return w.digest }),
		number(func(w *statementWrite) int64 { return w.redactions }),
		joined(writes, func(w *statementWrite) string { return w.document }),
		joined(writes, func(w *statementWrite) string { return w.sealed }),
		text(func(w *statementWrite) string { return w.documentDigest }),
		text(func(w *statementWrite) string { return w.eventKind }),
		joined(writes, func(w *statementWrite) string { return w.eventData }),
		text(func(w *statementWrite) string { return w.repoKey }),
		text(func(w *statementWrite) string { return w.validity }),
		text(func(w *statementWrite) string { return w.reason }),
		text(func(w *statementWrite) string { return w.liveRef }),
		number(func(w *statementWrite) int64 { return w.liveVersion }),
		text(func(w *statementWrite) string { return w.idemScope }),
		text(func(w *statementWrite) string { return w.idemKey }),
		text(func(w *statementWrite) string { return w.idemClaim }),
		number(func(w *statementWrite) int64 { return w.idemStatus }),
		joined(writes, func(w *statementWrite) string { return w.idemResponse }),
	}
}

// valueSeparator joins the long values of a call's writes (00025): JSON
// escapes every control character and a sealed value is a key id and
// base64, so none holds it; joinable checks.
const valueSeparator = "\x1e"

// joinable reports whether w's long values can be joined.
func (w *statementWrite) joinable() bool {
	for _, v := range []string{w.document, w.sealed, w.eventData, w.idemResponse} {
		if strings.Contains(v, valueSeparator) {
			return false
		}
	}
	return true
}

func joined(writes []*statementWrite, f func(w *statementWrite) string) string {
	var b strings.Builder
	size := len(writes)
	for _, w := range writes {
		size += len(f(w))
	}
	b.Grow(size)
	for i, w := range writes {
		if i > 0 {
			b.WriteString(valueSeparator)
		}
		b.WriteString(f(w))
	}
	return b.String()
}

// arrayLiteral is a's text form ("{}" when empty or nil).
func arrayLiteral(a driver.Valuer) string {
	v, _ := a.Value() // the string and integer arrays never fail
	if s, ok := v.(string); ok {
		return s
	}
	return "{}"
}

// batchedWrite is one write waiting for its call.
type batchedWrite struct {
	w    statementWrite
	done chan batchOutcome
}

type batchOutcome struct {
	validity, declined sql.NullString
	err                error
}

// writeBatcher runs the calls.
type writeBatcher struct {
	mu      sync.Mutex
	started bool
	closed  bool
	in      chan *batchedWrite
	stop    chan struct{}
	// assembling holds the one token of the runner that assembles the
	// next call. atDatabase counts the calls in flight; freed (under mu)
	// is closed and replaced when one returns.
	assembling chan struct{}
	atDatabase atomic.Int64
	freed      chan struct{}
	wg         sync.WaitGroup
	// runners overrides writeBatchRunners (tests); hold, when set, keeps
	// each runner from assembling its call until it is closed, and the
	// call then waits for gather writes (tests).
	runners int
	hold    atomic.Pointer[chan struct{}]
	gather  atomic.Int64
	// Counters, for tests: writes waiting to be taken, runners holding
	// one, calls made, the largest call.
	waiting, holding, calls, largest atomic.Int64
}

// writeBatched sends one write's arguments in the next call and returns
// what checkpointd_write_checkpoint answered for it, or the call's error
// (errBatchUnprepared when nothing was sent).
func (s *Store) writeBatched(ctx context.Context, call statementWrite) (validity, declined sql.NullString, err error) {
	b := &s.batcher
	if err := b.start(s); err != nil {
		return validity, declined, err
	}
	w := &batchedWrite{w: call, done: make(chan batchOutcome, 1)}
	b.waiting.Add(1)
	select {
	case b.in <- w:
		b.waiting.Add(-1)
	case <-ctx.Done():
		b.waiting.Add(-1)
		return validity, declined, ctx.Err()
	case <-b.stop:
		b.waiting.Add(-1)
		return validity, declined, errStoreClosed
	}
	o := <-w.done
	return o.validity, o.declined, o.err
}

func (b *writeBatcher) start(s *Store) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errStoreClosed
	}
	if b.started {
		return nil
	}
	b.started = true
	b.in, b.stop, b.freed = make(chan *batchedWrite), make(chan struct{}), make(chan struct{})
	b.assembling = make(chan struct{}, 1)
	b.assembling <- struct{}{}
	n := b.runners
	if n == 0 {
		n = writeBatchRunners
	}
	for range n {
		b.wg.Go(func() { s.runWriteBatches() })
	}
	return nil
}

// closeWait bounds Close's wait for the calls in flight: lib/pq cannot
// interrupt a read from a database that stopped answering, and Close must
// not hang on one. Their writes are still answered when the calls end.
const closeWait = 5 * time.Second

// close stops the runners once their calls are answered (or closeWait).
func (b *writeBatcher) close() {
	b.mu.Lock()
	started, closed := b.started, b.closed
	b.closed = true
	b.mu.Unlock()
	if !started || closed {
		return
	}
	close(b.stop)
	done := make(chan struct{})
	go func() {
		b.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(closeWait):
	}
}

// freedSignal is closed when a call returns, waking every runner that
// waits for company (pipelineMin).
func (b *writeBatcher) freedSignal() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.freed
}

func (b *writeBatcher) callReturned() {
	b.mu.Lock()
	defer b.mu.Unlock()
	close(b.freed)
	b.freed = make(chan struct{})
}

func (s *Store) runWriteBatches() {
	b := &s.batcher
	var conn batchConn
	defer conn.close()
	batch := make([]*batchedWrite, 0, maxBatchWrites)
	for {
		// One runner assembles a call at a time: the others, even idle,
		// leave the next writes to it instead of each starting a small
		// call of its own.
		select {
		case <-b.assembling:
		case <-b.stop:
			return
		}
		select {
		case w := <-b.in:
			batch = append(batch[:0], w)
		case <-b.stop:
			b.assembling <- struct{}{}
			return
		}
		if h := b.hold.Load(); h != nil {
			b.holding.Add(1)
			<-*h
			b.holding.Add(-1)
			for n := int(b.gather.Load()); len(batch) < n; {
				batch = append(batch, <-b.in)
			}
		}
		// Take whoever is already waiting. Wait for more only while
		// another call is at the database and this one is small: it would
		// go alone next to a call that is about to finish. (The signal is
		// taken before the count is read, so a return in between wakes.)
	more:
		for len(batch) < maxBatchWrites {
			select {
			case w := <-b.in:
				batch = append(batch, w)
				continue
			default:
			}
			freed := b.freedSignal()
			if len(batch) >= pipelineMin || b.atDatabase.Load() == 0 {
				break more
			}
			select {
			case w := <-b.in:
				batch = append(batch, w)
			case <-freed:
			case <-b.stop:
				break more
			}
		}
		b.atDatabase.Add(1)
		b.assembling <- struct{}{}
		outcomes := s.callWriteBatch(&conn, batch)
		b.atDatabase.Add(-1)
		b.callReturned()
		for i, w := range batch {
			w.done <- outcomes[i]
		}
		clear(batch)
	}
}

// batchConn is a runner's own connection, with the call prepared on it.
// database/sql runs a statement again, on another connection, when a
// pooled one breaks under it (lib/pq reports a connection lost after the
// statement was sent as a bad connection, too): a call that may have
// committed must never be sent twice. On its own connection a broken call
// just fails, and the next call takes a new connection.
type batchConn struct {
	conn *sqlx.Conn
	stmt *sqlx.Stmt
	used time.Time
	// failures is the store's failure count when the connection was last
	// used (Store.failures).
	failures int64
}

// batchConnIdle is how long a runner's connection may sit unused before a
// call checks it first (a round trip): one the database or the network
// dropped meanwhile is replaced before anything is sent on it. So is one
// used before the store met a failure or lost a listener's connection
// since (an outage, a restart, an operator ending backends: its
// connection is likely dead too). Under load a runner's calls follow each
// other closer than this and pay nothing; at an agent fleet's usual pace a
// write pays one round trip, and never a 503 for a connection that died
// while it sat idle.
const batchConnIdle = time.Second

// ready makes sure c has a live connection with the call prepared. Nothing
// of a call is sent before it returns nil. failures is the store's failure
// count now.
func (c *batchConn) ready(ctx context.Context, db *sqlx.DB, failures int64) error {
	if c.conn != nil && (time.Since(c.used) > batchConnIdle || failures != c.failures) {
		if err := c.conn.PingContext(ctx); err != nil {
			c.close()
		}
	}
	if c.conn == nil {
		conn, err := db.Connx(ctx)
		if err != nil {
			return err
		}
		stmt, err := conn.PreparexContext(ctx, callWriteCheckpoints)
		if err != nil {
			conn.Close()
			return err
		}
		c.conn, c.stmt = conn, stmt
	}
	c.used, c.failures = time.Now(), failures
	return nil
}

func (c *batchConn) close() {
	if c.conn != nil {
		c.stmt.Close()
		c.conn.Close()
		c.conn, c.stmt = nil, nil
	}
}

// callWriteBatch makes one call for batch on conn and returns each write's
// outcome, in batch's order.
func (s *Store) callWriteBatch(conn *batchConn, batch []*batchedWrite) []batchOutcome {
	b := &s.batcher
	b.calls.Add(1)
	for n := int64(len(batch)); ; {
		l := b.largest.Load()
		if n <= l || b.largest.CompareAndSwap(l, n) {
			break
		}
	}
	// In session order, as every lock of several session rows is taken
	// (ORDER BY id; a session id is "ses_" and lowercase hex, which every
	// collation orders as bytes do): two calls, or a call and a drain decision, never wait
	// for each other in a circle, and lock_timeout (00025) ends any other
	// wait long before a deadlock would be detected. Writes of one session
	// keep their order.
	order := make([]int, len(batch))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int { return strings.Compare(batch[x].w.session, batch[y].w.session) })
	writes := make([]*statementWrite, len(batch))
	for k, i := range order {
		writes[k] = &batch[i].w
	}
	outcomes := make([]batchOutcome, len(batch))
	all := func(err error) []batchOutcome {
		for i := range outcomes {
			outcomes[i] = batchOutcome{err: err}
		}
		return outcomes
	}
	ctx, cancel := context.WithTimeout(context.Background(), writeBatchTimeout)
	defer cancel()
	if err := conn.ready(ctx, s.wdb, s.failures.Load()); err != nil {
		return all(fmt.Errorf("%w: %w", errBatchUnprepared, err))
	}
	failed := func(err error) []batchOutcome {
		if rolledBack(err) {
			return all(fmt.Errorf("%w: %w", errBatchRolledBack, err))
		}
		conn.close() // whatever broke, the next call starts afresh
		return all(err)
	}
	rows, err := conn.stmt.QueryxContext(ctx, columns(writes)...)
	if err != nil {
		return failed(err)
	}
	// A row that cannot be read leaves the outcome unknown (the deferred
	// Close completes the statement, which may commit): every write is
	// answered as failed, as a lost connection is.
	defer rows.Close()
	answered := make([]bool, len(batch))
	for rows.Next() {
		var n int
		var o batchOutcome
		if err := rows.Scan(&n, &o.validity, &o.declined); err != nil {
			conn.close()
			return all(err)
		}
		if n < 1 || n > len(batch) || answered[n-1] {
			conn.close()
			return all(fmt.Errorf("checkpointd_write_checkpoints answered for write %d of %d", n, len(batch)))
		}
		answered[n-1] = true
		outcomes[order[n-1]] = o
	}
	// The rows end at the commit: its failure is the call's.
	if err := rows.Err(); err != nil {
		return failed(err)
	}
	if err := rows.Close(); err != nil {
		return failed(err)
	}
	if i := slices.Index(answered, false); i >= 0 {
		return all(fmt.Errorf("checkpointd_write_checkpoints did not answer for write %d of %d", i+1, len(batch)))
	}
	return outcomes
}
