// Package store persists the checkpointd domain in SQLite (the embedded
// default) or PostgreSQL, through one implementation on sqlx. The SQL is
// shared; a small dialect value holds the few real differences.
package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/migrations"
)

func init() {
	// modernc registers itself as "sqlite"; tell sqlx it binds with '?'.
	sqlx.BindDriver("sqlite", sqlx.QUESTION)
}

// sqlitePragmas apply to every pooled connection because they are in the
// DSN: WAL with synchronous=FULL makes a commit durable before we answer;
// _txlock=immediate takes the write lock at BEGIN so read-then-write
// transactions never fail with SQLITE_BUSY halfway.
const sqlitePragmas = "_pragma=busy_timeout(5000)&_pragma=foreign_keys(1)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)"

// Config says which database to open.
type Config struct {
	// URL is a postgres:// URL, or the path of an SQLite database file.
	URL    string
	Clock  checkpointd.Clock
	Logger *slog.Logger
	// Keys seal free-text fields and stored responses. Commands that touch
	// neither (migrate, token) may open the store without keys; a write or
	// read that needs them then fails closed.
	Keys *checkpointd.Keyring
	// MaxConns bounds the PostgreSQL connections of the pool
	// (DefaultMaxConns when 0); the listeners of the token cache and the
	// feed and the serving lock take a few more of their own.
	MaxConns int
}

// DefaultMaxConns is the PostgreSQL pool's default bound: every replica
// takes this many (plus a few) of the server's max_connections.
const DefaultMaxConns = 32

// Store is the persistence of sessions, runs, checkpoints, events and API
// tokens. It is safe for concurrent use; every invariant is enforced by the
// database, so several Stores (replicas) may share one PostgreSQL.
type Store struct {
	dialect migrations.Dialect
	// rdb serves reads; wdb serves writes. On SQLite wdb has a single
	// connection so writers queue in Go instead of spinning on busy_timeout;
	// on PostgreSQL both are the same pool.
	rdb, wdb *sqlx.DB
	clock    checkpointd.Clock
	log      *slog.Logger
	keys     *checkpointd.Keyring
	// group batches SQLite write transactions (write.go); nil on PostgreSQL.
	group *groupCommitter
	stmts statements
	// exclusiveRetry and exclusiveKeepalive time RunExclusive.
	exclusiveRetry, exclusiveKeepalive time.Duration
	obs                                Observer
	// errorsKeep is how many durable errors are kept per source.
	errorsKeep int
	// runLiveness is --run-liveness (liveness.go); 0: the default.
	runLiveness time.Duration
	// settling lets one Settle of this process run at a time (settle.go):
	// a one-slot semaphore, so a caller can stop waiting when its ctx ends.
	settling chan struct{}
	// ready is the readiness answer and probe (ready.go).
	ready    readiness
	warnings warnings // ReadyWarnings (tablerows.go)
	// expiring does the same for the reads that end overdue leases
	// (lease_expiry.go).
	expiring chan struct{}
	// inc is this process's incarnation, the owner of the Idempotency-Key
	// claims it makes (incarnation.go); claims are those its requests are
	// processing, releases those it failed to release (claims.go).
	inc      incarnation
	claims   inFlight
	releases releases
	// afterDrainCheck, set only by tests (export_test.go), runs in a
	// creating transaction once its "not draining" check passed: the window
	// a concurrent drain must not slip through, held open on purpose.
	afterDrainCheck func(ctx context.Context, tx *sqlx.Tx)
	// url is the PostgreSQL URL, for the LISTEN connections of the token
	// cache and the feed; "" on SQLite. tokens is the authentication cache
	// (tokencache.go); feed wakes this process's feed readers after a
	// commit (feed_wake.go).
	url      string
	tokens   tokenCache
	tokenUse tokenUse // tokens.go: when last_used_at was last written
	feed     feedWaiters
	// written are the sessions the one-statement checkpoint write knows
	// (onestatement.go).
	written writtenSessions
	// notifier wakes the other replicas' feed readers (feed_notify.go).
	notifier feedNotifier
	// batcher sends the one-statement writes of several sessions in one
	// call (writebatch.go).
	batcher writeBatcher
	// failures counts the database failures met (failed): a connection
	// held since the last one is checked before it is used again.
	failures atomic.Int64
	// idleConns is the PostgreSQL pool's idle bound, restored after
	// dropIdleConns.
	idleConns int
	// audit is where the reconcile pass's lease audit goes on (reconcile.go).
	audit leaseAudit
}

// withBinaryParameters asks lib/pq to send parameters in one round trip
// (Parse+Bind+Execute together) instead of two, unless the operator chose
// otherwise in the URL: most statements here carry parameters, and on the
// write path the round trips are what the database waits on.
func withBinaryParameters(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw // lib/pq reports the malformed URL itself
	}
	q := u.Query()
	if q.Has("binary_parameters") {
		return raw
	}
	q.Set("binary_parameters", "yes")
	u.RawQuery = q.Encode()
	return u.String()
}

// IsPostgres reports whether url names a PostgreSQL database.
func IsPostgres(url string) bool {
	return strings.HasPrefix(url, "postgres://") || strings.HasPrefix(url, "postgresql://")
}

// Open connects to the database named by cfg.URL. It does not migrate; call
// Migrate. Errors wrap checkpointd.ErrStoreUnavailable when the database
// cannot be reached.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	s := &Store{clock: cfg.Clock, log: cfg.Logger, keys: cfg.Keys, errorsKeep: DefaultErrorsKeep,
		exclusiveRetry: exclusiveRetry, exclusiveKeepalive: exclusiveKeepalive, settling: make(chan struct{}, 1),
		expiring: make(chan struct{}, 1), inc: incarnation{id: newClaim()}}
	if s.clock == nil {
		s.clock = checkpointd.SystemClock{}
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if IsPostgres(cfg.URL) {
		db, err := sqlx.Open("postgres", withBinaryParameters(cfg.URL))
		if err != nil {
			return nil, fmt.Errorf("store: open postgres: %w", err)
		}
		n := cfg.MaxConns
		if n <= 0 {
			n = DefaultMaxConns
		}
		db.SetMaxOpenConns(n)
		db.SetMaxIdleConns(n)
		db.SetConnMaxIdleTime(5 * time.Minute)
		s.idleConns = n
		s.dialect, s.rdb, s.wdb, s.url = migrations.Postgres, db, db, cfg.URL
	} else {
		if cfg.URL == "" {
			return nil, errors.New("store: no database path")
		}
		// Create the file owner-only before SQLite does: the WAL and shared
		// memory files inherit its mode.
		if f, err := os.OpenFile(cfg.URL, os.O_RDWR|os.O_CREATE, 0o600); err == nil {
			f.Close()
		}
		path := (&url.URL{Path: cfg.URL}).EscapedPath()
		w, err := sqlx.Open("sqlite", "file:"+path+"?"+sqlitePragmas+"&_txlock=immediate")
		if err != nil {
			return nil, fmt.Errorf("store: open sqlite: %w", err)
		}
		w.SetMaxOpenConns(1)
		w.SetMaxIdleConns(1)
		w.SetConnMaxLifetime(0)
		r, err := sqlx.Open("sqlite", "file:"+path+"?"+sqlitePragmas)
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("store: open sqlite: %w", err)
		}
		r.SetMaxOpenConns(8)
		r.SetMaxIdleConns(8)
		s.dialect, s.rdb, s.wdb = migrations.SQLite, r, w
		s.group = newGroupCommitter(s)
	}
	s.startReleases()
	if err := s.Ping(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// SetKeys installs the server keys once they are verified against the
// database (which needs an open store). Call it before serving requests.
func (s *Store) SetKeys(kr *checkpointd.Keyring) { s.keys = kr }

// Dialect tells which backend the store runs on.
func (s *Store) Dialect() migrations.Dialect { return s.dialect }

// Migrate applies every pending migration. Safe to run from several
// processes at once on PostgreSQL.
func (s *Store) Migrate(ctx context.Context) (version int64, err error) {
	// On SQLite the writer connection runs migrations so nothing else holds
	// the write lock meanwhile.
	return migrations.Up(ctx, s.dialect, s.wdb.DB)
}

// Ping checks that the database answers. It returns an error wrapping
// checkpointd.ErrStoreUnavailable when it does not.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.rdb.PingContext(ctx); err != nil {
		s.failed(OpPing, err)
		return fmt.Errorf("%w: %w", checkpointd.ErrStoreUnavailable, err)
	}
	return nil
}

// Close closes the database connections, after the queued writes are done.
// Its Idempotency-Key claims are then free for every replica.
func (s *Store) Close() error {
	s.closeReadiness()
	s.closeTokenListener()
	s.closeTokenUse()
	s.stopReleases()
	s.batcher.close()
	s.stopFeedNotifier()
	if s.group != nil {
		s.group.close()
	}
	s.closeIncarnation()
	err := errors.Join(s.closeStatements(), s.rdb.Close())
	if s.wdb != s.rdb {
		err = errors.Join(err, s.wdb.Close())
	}
	return err
}

// classify maps an error to the domain: domain errors pass, anything else is
// store_unavailable with the cause kept for the log.
func (s *Store) classify(err error) error { return s.classifyOp(OpRead, err) }

// classifyOp is classify for an operation of class op, which the observer
// is told about when the database failed.
func (s *Store) classifyOp(op string, err error) error {
	if err == nil {
		return nil
	}
	for _, d := range checkpointd.Sentinels {
		if errors.Is(err, d) {
			return err
		}
	}
	s.failed(op, err)
	return fmt.Errorf("%w: %w", checkpointd.ErrStoreUnavailable, err)
}

// retryReason says why a failed transaction may be tried again, or "":
// RetryConflict for PostgreSQL serialization failures, deadlocks and lock
// timeouts and SQLite busy (the database refused it, so nothing
// committed); RetryConnection for a connection that broke before the
// commit (the server ended it, or the pool handed out a dead one).
func retryReason(err error) string {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return ""
	}
	for _, d := range checkpointd.Sentinels {
		if errors.Is(err, d) {
			return "" // the transaction's own answer
		}
	}
	var pe *pq.Error
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "40001", pe.Code == "40P01", pe.Code == "55P03":
			return RetryConflict
		case pe.Code == "57P01", pe.Code == "57P02", pe.Code.Class() == "08":
			return connectionUnlessCommit(err)
		}
		return ""
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		if se.Code()&0xff == sqlite3.SQLITE_BUSY {
			return RetryConflict
		}
		return ""
	}
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return connectionUnlessCommit(err)
	}
	return ""
}

// retryable reports a conflict worth another attempt (RetryConflict).
func retryable(err error) bool { return retryReason(err) == RetryConflict }

func connectionUnlessCommit(err error) string {
	var ce commitError
	if errors.As(err, &ce) {
		return ""
	}
	return RetryConnection
}

// isUnique reports a unique-constraint violation.
func isUnique(err error) bool {
	var pe *pq.Error
	if errors.As(err, &pe) {
		return pe.Code == "23505"
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
	}
	return false
}

// dialectSQL picks the statement written for the store's engine.
func (s *Store) dialectSQL(sqlite, postgres string) string {
	if s.dialect == migrations.Postgres {
		return postgres
	}
	return sqlite
}

// now is the clock's time at the precision the columns keep, so what a
// write returns equals what a later read returns.
func (s *Store) now() time.Time { return s.clock.Now().Truncate(time.Microsecond) }

// micros and fromMicros convert between the clock's times and the integer
// columns both engines store them in.
func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

func fromNullMicros(us sql.NullInt64) *time.Time {
	if !us.Valid {
		return nil
	}
	t := fromMicros(us.Int64)
	return &t
}

// ignoreNoRows treats "no row" as nothing to do.
func ignoreNoRows(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	return err
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

func jsonMarshal(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}
