package store

import (
	"context"
	"errors"
	"sync"

	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd/migrations"
)

// An Idempotency-Key claim (idempotency.go) names its owner: the
// incarnation of the process that made it, a random id. Whether an owner
// lives is what the database knows, not what a clock guesses. On
// PostgreSQL each incarnation holds a session-level advisory lock named by
// its id, on a connection of its own, for as long as it lives: when the
// process dies its connections close and the server ends its sessions, and
// when the server restarts every session ends, so the lock is gone the
// moment the owner is, and a replica that finds a claim of a dead owner
// takes it over at once. A process whose lock went without it (the server
// restarted under it) is a new incarnation from its next claim on: what it
// claimed before is free for anyone, and a request of it still processing
// such a claim is fenced off by the takeover (complete). On SQLite, one
// daemon per file (DESIGN §10), every owner but this process is a
// previous process.

// incarnationLock prefixes the name of an incarnation's lock (lockSQL).
const incarnationLock = "incarnation:"

// errOwnerLost reports that this process's incarnation lock is gone; the
// claim is made again under a new incarnation.
var errOwnerLost = errors.New("this process lost the lock that shows it alive")

// incarnation is this process's owner id for the claims it makes.
type incarnation struct {
	mu sync.Mutex
	id string
	// conn holds the lock named by id (PostgreSQL): nil until the first
	// claim, and again once the lock was found lost.
	conn *sqlx.Conn
}

// owner returns this process's incarnation, alive: on PostgreSQL it takes
// a new incarnation's lock first when none is held. Errors:
// ErrStoreUnavailable.
func (s *Store) owner(ctx context.Context) (string, error) {
	inc := &s.inc
	inc.mu.Lock()
	defer inc.mu.Unlock()
	if s.dialect != migrations.Postgres || inc.conn != nil {
		return inc.id, nil
	}
	// A new id each time: claims made under a lost lock must never pass
	// for a live owner's again.
	id := newClaim()
	conn, err := s.wdb.Connx(ctx)
	if err != nil {
		return "", s.classifyOp(OpWrite, err)
	}
	var got bool
	if err := conn.GetContext(ctx, &got, `SELECT pg_try_advisory_lock(`+lockSQL+`)`, incarnationLock+id); err != nil || !got {
		discard(conn)
		if err == nil {
			err = errors.New("a fresh incarnation's lock is held elsewhere")
		}
		return "", s.classifyOp(OpWrite, err)
	}
	inc.id, inc.conn = id, conn
	return id, nil
}

// ownerLost forgets incarnation id once its lock was found gone, so the
// next claim takes a new one.
func (s *Store) ownerLost(id string) {
	inc := &s.inc
	inc.mu.Lock()
	defer inc.mu.Unlock()
	if inc.id == id && inc.conn != nil {
		go discard(inc.conn) // its session is gone; closing must not hold up the claim
		inc.conn = nil
	}
}

// ownerLives reports, in tx, whether incarnation id lives: whether some
// session holds its lock (PostgreSQL). The probe takes the lock shared,
// for the transaction only, when nobody holds it exclusively: any number
// of probes pass at once, and none ever stands in an owner's way (an
// owner's id is fresh and its lock taken before it claims anything).
func ownerLives(ctx context.Context, tx *sqlx.Tx, id string) (bool, error) {
	var free bool
	err := tx.GetContext(ctx, &free, `SELECT pg_try_advisory_xact_lock_shared(`+lockSQL+`)`, incarnationLock+id)
	return !free, err
}

// closeIncarnation lets go of the lock: a store that closes frees its
// claims for every replica at once.
func (s *Store) closeIncarnation() {
	inc := &s.inc
	inc.mu.Lock()
	defer inc.mu.Unlock()
	if inc.conn != nil {
		discard(inc.conn)
		inc.conn = nil
	}
}
