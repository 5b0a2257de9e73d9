package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/migrations"
)

// IdempotencyClaimTTL bounds how long a claim counts as in flight when
// nothing shows that its request ended: a claim of a live replica other
// than this one, or one made before claims named their owner. A claim
// whose owner is gone, or whose request in this process has ended, is free
// at once (claimFree). A claim older than that is taken over all the same
// (its request hung, or its replica lost the store but not its lock); the
// takeover is fenced, so the old request can no longer complete it.
const IdempotencyClaimTTL = time.Minute

// Idempotency ties a write to a claimed Idempotency-Key. The write calls
// Render with its result inside its transaction and stores the bytes, with
// Status, as the response to replay.
type Idempotency struct {
	Scope, Key, Claim string
	Status            int
	Render            func(result any) ([]byte, error)
}

// IdempotencyConflict is a key used before for a different request
// (checkpointd.ErrIdempotencyConflict); Stored is the response of that
// request when it completed, so the caller may say what the key names.
type IdempotencyConflict struct{ Stored []byte }

func (e *IdempotencyConflict) Error() string {
	return checkpointd.ErrIdempotencyConflict.Error() + ": the key was used for a different request"
}
func (e *IdempotencyConflict) Unwrap() error { return checkpointd.ErrIdempotencyConflict }

// Replay is the stored response of a completed idempotent request.
type Replay struct {
	Status int
	Body   []byte
}

const claimInsert = `
INSERT INTO idempotency (scope, idem_key, digest, claim, owner, claimed_at, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (scope, idem_key) DO NOTHING`

type idemRow struct {
	Digest    string `db:"digest"`
	Claim     string `db:"claim"`
	Owner     string `db:"owner"`
	ClaimedAt int64  `db:"claimed_at"`
	Status    int    `db:"status"`
	Response  string `db:"response"`
}

// ClaimIdempotency claims key in scope for a request whose digest is given.
// It returns the claim to pass to the write, or the replay of a completed
// request with the same digest. The claim counts as processed by this
// process until the write made under it returns or it is released
// (claims.go). Errors: ErrIdempotencyConflict (the key was used for a
// different request), ErrIdempotencyInFlight (a request still processing
// holds the key), ErrStoreUnavailable.
func (s *Store) ClaimIdempotency(ctx context.Context, scope, key, digest string) (claim string, replay *Replay, err error) {
	claim = newClaim()
	// Processed from before its row exists: a retry in this process that
	// finds the row must find its request processing.
	s.claims.start(claim)
	defer func() {
		if err != nil || replay != nil {
			s.claims.end(claim)
			claim = ""
		}
	}()
	for attempt := 0; ; attempt++ {
		owner, err := s.owner(ctx)
		if err != nil {
			return claim, nil, err
		}
		replay, err = s.claimAs(ctx, scope, key, digest, claim, owner)
		if errors.Is(err, errOwnerLost) && attempt == 0 {
			s.ownerLost(owner)
			continue
		}
		if errors.Is(err, checkpointd.ErrStoreUnavailable) {
			// Whether the claim committed is unknown: release it later
			// rather than have it block its key's retries elsewhere.
			s.queueRelease(pendingRelease{scope, key, claim})
		}
		return claim, replay, err
	}
}

// claimAs is one attempt of ClaimIdempotency by incarnation owner.
func (s *Store) claimAs(ctx context.Context, scope, key, digest, claim, owner string) (replay *Replay, err error) {
	now := s.now()
	err = s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
		replay = nil
		if s.dialect == migrations.Postgres {
			// Claim only as a live owner: a claim of an owner that is gone
			// would be free for anyone while its request processes.
			lives, err := ownerLives(ctx, tx, owner)
			if err != nil {
				return err
			}
			if !lives {
				return errOwnerLost
			}
		}
		res, err := tx.ExecContext(ctx, tx.Rebind(claimInsert), scope, key, digest, claim, owner, micros(now), micros(now))
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 1 {
			return nil
		}
		var row idemRow
		if err := tx.GetContext(ctx, &row, tx.Rebind(`SELECT digest, claim, owner, claimed_at, status, response FROM idempotency WHERE scope = ? AND idem_key = ?`), scope, key); err != nil {
			return err
		}
		var stored []byte
		if row.Status != 0 {
			if s.keys == nil {
				return errNoKeys
			}
			if stored, err = s.keys.Open(row.Response, idemAAD(scope, key)); err != nil {
				return fmt.Errorf("%w: stored response unreadable: %w", checkpointd.ErrStoreUnavailable, err)
			}
		}
		switch {
		case row.Digest != digest:
			return &IdempotencyConflict{Stored: stored}
		case row.Status != 0:
			replay = &Replay{Status: row.Status, Body: stored}
			return nil
		}
		free, err := s.claimFree(ctx, tx, row, owner, now)
		if err != nil {
			return err
		}
		if !free {
			return fmt.Errorf("%w: a request with this key is being processed", checkpointd.ErrIdempotencyInFlight)
		}
		res, err = tx.ExecContext(ctx, tx.Rebind(`UPDATE idempotency SET claim = ?, owner = ?, claimed_at = ? WHERE scope = ? AND idem_key = ? AND claim = ?`),
			claim, owner, micros(now), scope, key, row.Claim)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return fmt.Errorf("%w: a request with this key is being processed", checkpointd.ErrIdempotencyInFlight)
		}
		return nil
	})
	return replay, err
}

// claimFree reports whether the uncompleted claim in row may be taken over
// by a request of incarnation owner: whether its own request is known to
// be over, or has held it past the TTL.
func (s *Store) claimFree(ctx context.Context, tx *sqlx.Tx, row idemRow, owner string, now time.Time) (bool, error) {
	switch {
	case now.Sub(fromMicros(row.ClaimedAt)) >= IdempotencyClaimTTL:
		return true, nil // however it is held: its request hung or died unseen
	case s.claims.has(row.Claim):
		return false, nil // a request of this process is processing it
	case row.Owner == owner:
		return true, nil // this process's, and its request ended (its release failed)
	case s.dialect != migrations.Postgres:
		return true, nil // one process per file: a previous process's
	case row.Owner == "":
		return false, nil // made before claims named their owner: the TTL decides
	}
	// A live replica's request may still be processing it there.
	lives, err := ownerLives(ctx, tx, row.Owner)
	if err != nil {
		return false, err
	}
	return !lives, nil
}

// complete stores the response of an idempotent write under its claim, in
// the write's transaction. A lost claim (taken over: past the TTL, or its
// owner was found gone) aborts the write: the other request owns the key
// now.
func (s *Store) complete(ctx context.Context, tx *sqlx.Tx, idem *Idempotency, result any) error {
	if idem == nil {
		return nil
	}
	if s.keys == nil {
		return errNoKeys
	}
	body, err := idem.Render(result)
	if err != nil {
		return err
	}
	sealed := s.keys.Seal(body, idemAAD(idem.Scope, idem.Key))
	res, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE idempotency SET claim = '', status = ?, response = ? WHERE scope = ? AND idem_key = ? AND claim = ?`),
		idem.Status, sealed, idem.Scope, idem.Key, idem.Claim)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("%w: the claim on this key was taken over", checkpointd.ErrIdempotencyInFlight)
	}
	return nil
}

// releaseClaim drops an uncompleted claim, if it is still the one given.
const releaseClaim = `DELETE FROM idempotency WHERE scope = ? AND idem_key = ? AND claim = ? AND status = 0`

// ReleaseIdempotency drops an uncompleted claim after its request failed, so
// a retry with the same key runs again instead of waiting out the TTL. A
// release the store does not take is kept and made once it answers again
// (claims.go); meanwhile a retry in this process takes the claim over.
// Errors: ErrStoreUnavailable.
func (s *Store) ReleaseIdempotency(ctx context.Context, scope, key, claim string) error {
	s.claims.end(claim)
	err := s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
		_, err := tx.ExecContext(ctx, tx.Rebind(releaseClaim), scope, key, claim)
		return err
	})
	if err == nil {
		return nil
	}
	if !s.queueRelease(pendingRelease{scope, key, claim}) {
		return fmt.Errorf("%w (too many releases wait already: this one waits for the claim TTL)", err)
	}
	return fmt.Errorf("%w (kept: made once the store answers again)", err)
}

func idemAAD(scope, key string) []byte { return []byte("idempotency\x00" + scope + "\x00" + key) }

func newClaim() string {
	b := make([]byte, 12)
	rand.Read(b)
	return hex.EncodeToString(b)
}

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
// daemon per file, every owner but this process is a
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

// What this process knows of its own claims (idempotency.go): which ones a
// request of it is still processing, and which ones it failed to release.

// inFlight is the set of claims whose requests this process is processing:
// from before the claim's row exists until the request's write returned or
// its claim was released. A claim of this incarnation outside it belongs to
// a request that ended, and a retry may take it over.
type inFlight struct {
	mu sync.Mutex
	m  map[string]struct{}
}

func (f *inFlight) start(claim string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[string]struct{}{}
	}
	f.m[claim] = struct{}{}
}

func (f *inFlight) end(claim string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, claim)
}

func (f *inFlight) has(claim string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.m[claim]
	return ok
}

// requestEnded marks the claim of a write as no longer processed, once the
// write returned, committed or not: completed, a retry replays it; not,
// a retry may take it over even if its release never reaches the store.
func (s *Store) requestEnded(idem *Idempotency) {
	if idem != nil {
		s.claims.end(idem.Claim)
	}
}

// maxPendingReleases bounds the releases kept for later. One that does not
// fit is still free for retries in this process, and for every replica
// once this process is gone or the claim TTL passed.
const maxPendingReleases = 1024

// releaseRetry is how often releases that failed are tried again while
// the store does not answer. Any write that commits meanwhile tries them
// at once.
const releaseRetry = time.Second

type pendingRelease struct{ scope, key, claim string }

// releases are the claims whose release failed because the store could not
// be reached: other replicas cannot tell such a claim's request ended from
// one still processing, so this process releases them as soon as the
// store answers again, on its next successful write or within releaseRetry.
type releases struct {
	mu      sync.Mutex
	pending []pendingRelease
	// waiting is len(pending) > 0, read on every commit without the lock.
	waiting atomic.Bool
	kick    chan struct{}
	stop    context.CancelFunc
	done    chan struct{}
}

// startReleases starts the goroutine that releases what failed to.
func (s *Store) startReleases() {
	ctx, cancel := context.WithCancel(context.Background())
	r := &s.releases
	r.kick, r.stop, r.done = make(chan struct{}, 1), cancel, make(chan struct{})
	go s.releaseLoop(ctx)
}

// stopReleases stops it; what is still pending is dropped with the
// process, whose claims then are free for everyone (incarnation.go).
func (s *Store) stopReleases() {
	if r := &s.releases; r.stop != nil {
		r.stop()
		<-r.done
	}
}

// queueRelease keeps a release that failed for later. It reports false
// when too many are kept already.
func (s *Store) queueRelease(p pendingRelease) bool {
	r := &s.releases
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pending) >= maxPendingReleases {
		return false
	}
	r.pending = append(r.pending, p)
	r.waiting.Store(true)
	r.signal()
	return true
}

func (r *releases) signal() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// committed is told of every write transaction that committed: the store
// answers again, so the releases that failed are made now; and the feed
// readers of this process look for new events.
func (s *Store) committed() {
	s.feed.wake()
	s.notifyFeed()
	if s.releases.waiting.Load() {
		s.releases.signal()
	}
}

func (s *Store) releaseLoop(ctx context.Context) {
	r := &s.releases
	defer close(r.done)
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		case <-retry:
		}
		retry = nil
		if err := s.releasePending(ctx); err != nil && ctx.Err() == nil {
			retry = time.After(releaseRetry)
		}
	}
}

// releasePending releases every kept claim in one transaction. Only this
// goroutine removes from the list, and only its head, so what was queued
// meanwhile stays.
func (s *Store) releasePending(ctx context.Context) error {
	r := &s.releases
	r.mu.Lock()
	batch := slices.Clone(r.pending)
	r.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	err := s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
		for _, p := range batch {
			if _, err := tx.ExecContext(ctx, tx.Rebind(releaseClaim), p.scope, p.key, p.claim); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending = r.pending[len(batch):]
	r.waiting.Store(len(r.pending) > 0)
	return nil
}
