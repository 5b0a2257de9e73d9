package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
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
		switch {
		case row.Digest != digest:
			return fmt.Errorf("%w: the key was used for a different request", checkpointd.ErrIdempotencyConflict)
		case row.Status != 0:
			if s.keys == nil {
				return errNoKeys
			}
			body, err := s.keys.Open(row.Response, idemAAD(scope, key))
			if err != nil {
				return fmt.Errorf("%w: stored response unreadable: %w", checkpointd.ErrStoreUnavailable, err)
			}
			replay = &Replay{Status: row.Status, Body: body}
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
