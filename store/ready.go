package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/migrations"
)

// Readiness (GET /readyz) is whether a write can commit now, not only
// whether the database answers: a full disk or a read-only database keeps
// reads working while every write fails. Ready therefore commits a small
// real write, at most once per readyTTL per store, and a write that failed
// with a store error meanwhile makes the store not ready until a later
// probe write commits.
//
// A probe that deletes its padding again frees the pages it wrote, and the
// next probe reuses them: on a database that is full (SQLite on a full
// disk keeps reusing its freelist) the small probe commits forever while
// every checkpoint write, which needs more room than that, fails. So a
// failed write also sets needRoom, and until it is cleared the probe pads
// with a whole checkpoint document's worth (readyRoomBytes) instead: it
// commits only once a write of checkpoint size can commit again, which
// one probe's own freed pages cannot fake, since the write that failed
// needed more than the free pages there were. Only such a probe, starting
// after the last failed write, clears needRoom.
const (
	// readyTTL is how long one answer stands: a storm of probes costs the
	// database one write per TTL.
	readyTTL = time.Second
	// readyProbeTimeout bounds a probe, and how long Ready waits for one.
	readyProbeTimeout = 2 * time.Second
	// readyProbeBytes is the size of the row the probe writes and deletes
	// again: larger than a page, so the probe needs free space as a
	// checkpoint write does, not just a rewrite in place. It is random, so
	// PostgreSQL cannot compress it away.
	readyProbeBytes = 8 << 10
	// readyRoomBytes is the probe's padding after a failed write: the
	// largest checkpoint document by default. A daemon configured for
	// larger documents may read ready while a write of such a document
	// still fails; that write sets needRoom again at once.
	readyRoomBytes = checkpointd.DefaultMaxDocumentBytes
)

// Reasons a store is not ready (NotReadyError.Reason); /readyz reports
// them.
const (
	ReasonUnreachable       = "unreachable"        // the database does not answer
	ReasonMigrationsPending = "migrations_pending" // it lacks migrations of this binary
	ReasonWriteFailed       = "write_failed"       // a write did not commit
	ReasonWriteTimeout      = "write_timeout"      // a write did not commit in time
)

// NotReadyError says why the store is not ready. It wraps
// checkpointd.ErrStoreUnavailable and its cause.
type NotReadyError struct {
	Reason string
	Err    error
}

func (e *NotReadyError) Error() string {
	return fmt.Sprintf("store not ready (%s): %v", e.Reason, e.Err)
}

func (e *NotReadyError) Unwrap() []error { return []error{checkpointd.ErrStoreUnavailable, e.Err} }

// readiness is the last answer of Ready and the probe computing the next.
type readiness struct {
	mu sync.Mutex
	// at is when err was decided: by a probe that finished, or by a
	// failed write (which wins over a probe that started before it).
	at  time.Time
	err error
	// probing is closed when the running probe finishes; nil when none
	// runs.
	probing chan struct{}
	probes  atomic.Int64
	// needRoom is set by a failed write and cleared by a probe with
	// readyRoomBytes of padding that started after it and committed.
	needRoom bool
	// closed is set by Close: a closing store is not ready, whatever an
	// earlier probe found.
	closed bool
}

// errClosedNotReady is Ready's answer once Close began.
var errClosedNotReady = &NotReadyError{ReasonUnreachable, errStoreClosed}

// closeReadiness makes every later Ready answer errClosedNotReady.
func (s *Store) closeReadiness() {
	s.ready.mu.Lock()
	s.ready.closed = true
	s.ready.mu.Unlock()
}

// Ready reports whether the store can serve: the database answers, carries
// every migration of this binary, and commits a write. The answer is
// cached for a second and concurrent callers share one probe; a caller
// waits at most readyProbeTimeout (or until ctx ends). Errors:
// *NotReadyError (wrapping ErrStoreUnavailable).
func (s *Store) Ready(ctx context.Context) error {
	r := &s.ready
	for {
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			return errClosedNotReady
		}
		if !r.at.IsZero() && time.Since(r.at) < readyTTL {
			err := r.err
			r.mu.Unlock()
			return err
		}
		if r.probing == nil {
			r.probing = make(chan struct{})
			go s.probeReady(r.probing)
		}
		done := r.probing
		r.mu.Unlock()
		timer := time.NewTimer(readyProbeTimeout)
		select {
		case <-done:
			timer.Stop()
			continue // its answer is fresh now
		case <-timer.C:
			return &NotReadyError{ReasonWriteTimeout, fmt.Errorf("no answer within %v", readyProbeTimeout)}
		case <-ctx.Done():
			timer.Stop()
			return &NotReadyError{ReasonWriteTimeout, ctx.Err()}
		}
	}
}

// probeReady runs one probe, records its answer and closes done. It runs
// on its own, bounded, so no caller's cancellation cuts it short for the
// others.
func (s *Store) probeReady(done chan struct{}) {
	r := &s.ready
	r.probes.Add(1)
	r.mu.Lock()
	started, padding := time.Now(), readyProbeBytes
	if r.needRoom {
		padding = readyRoomBytes
	}
	r.mu.Unlock()
	err := s.probe(padding)
	r.mu.Lock()
	// A success does not hide a write that failed while the probe ran.
	if err != nil || !r.at.After(started) {
		r.at, r.err = time.Now(), err
		if err == nil && padding == readyRoomBytes {
			r.needRoom = false
		}
	}
	r.probing = nil
	r.mu.Unlock()
	close(done)
}

// The probe's rows in settings: a heartbeat that says when a readiness
// write last committed, and the padding row it writes and deletes.
const (
	settingReadyHeartbeat = "readiness:last_write"
	settingReadyPadding   = "readiness:probe:"
)

const upsertSetting = `INSERT INTO settings (name, value) VALUES (?, ?)
ON CONFLICT (name) DO UPDATE SET value = excluded.value`

// probe commits a write with paddingBytes of padding (the comment at the
// top of this file says why the size matters).
func (s *Store) probe(paddingBytes int) error {
	ctx, cancel := context.WithTimeout(context.Background(), readyProbeTimeout)
	defer cancel()
	notReady := func(reason string, err error) error {
		if ctx.Err() != nil {
			reason = ReasonWriteTimeout
		}
		return &NotReadyError{reason, err}
	}
	if err := s.rdb.PingContext(ctx); err != nil {
		s.failed(OpPing, err)
		return notReady(ReasonUnreachable, err)
	}
	pending, err := migrations.Pending(ctx, s.dialect, s.rdb.DB)
	if err != nil {
		return notReady(ReasonUnreachable, err)
	}
	if pending {
		return &NotReadyError{ReasonMigrationsPending, errors.New("migrations pending")}
	}
	padding := make([]byte, paddingBytes/2)
	_, _ = rand.Read(padding)
	name := settingReadyPadding + hex.EncodeToString(padding[:8])
	// Its own transaction, not a group commit on SQLite: a probe that
	// finds the disk full must not fail the writes it would share one
	// with.
	err = s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO settings (name, value) VALUES (?, ?)`), name, hex.EncodeToString(padding)); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, tx.Rebind(`DELETE FROM settings WHERE name = ?`), name); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, tx.Rebind(upsertSetting), settingReadyHeartbeat, strconv.FormatInt(micros(s.now()), 10))
		return err
	})
	if err != nil {
		return notReady(ReasonWriteFailed, err)
	}
	return nil
}

// writeFailed makes the store not ready, from now until a probe that
// starts later commits a checkpoint's worth of padding (needRoom): a write
// just failed with a store error. Conflicts worth a retry (serialization
// failures, a busy SQLite) are contention, not a store that cannot write,
// and do not count.
func (s *Store) writeFailed(err error) {
	if retryable(err) {
		return
	}
	r := &s.ready
	r.mu.Lock()
	r.at, r.err = time.Now(), &NotReadyError{ReasonWriteFailed, err}
	r.needRoom = true
	r.mu.Unlock()
}
