package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd"
)

// IdempotencyClaimTTL is how long a claimed key counts as in flight. A claim
// older than that belongs to a request that died (the daemon crashed or the
// client went away mid-write), and the next request may take it over; the
// takeover is fenced, so the dead request can no longer complete it.
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
INSERT INTO idempotency (scope, idem_key, digest, claim, claimed_at, created_at)
VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (scope, idem_key) DO NOTHING`

type idemRow struct {
	Digest    string `db:"digest"`
	Claim     string `db:"claim"`
	ClaimedAt int64  `db:"claimed_at"`
	Status    int    `db:"status"`
	Response  string `db:"response"`
}

// ClaimIdempotency claims key in scope for a request whose digest is given.
// It returns the claim to pass to the write, or the replay of a completed
// request with the same digest. Errors: ErrIdempotencyConflict (the key was
// used for a different request), ErrIdempotencyInFlight (another request
// holds the key), ErrStoreUnavailable.
func (s *Store) ClaimIdempotency(ctx context.Context, scope, key, digest string) (claim string, replay *Replay, err error) {
	now := s.now()
	claim = newClaim()
	err = s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, tx.Rebind(claimInsert), scope, key, digest, claim, micros(now), micros(now))
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 1 {
			return nil
		}
		var row idemRow
		if err := tx.GetContext(ctx, &row, tx.Rebind(`SELECT digest, claim, claimed_at, status, response FROM idempotency WHERE scope = ? AND idem_key = ?`), scope, key); err != nil {
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
		case now.Sub(fromMicros(row.ClaimedAt)) < IdempotencyClaimTTL:
			return fmt.Errorf("%w: a request with this key is being processed", checkpointd.ErrIdempotencyInFlight)
		}
		res, err = tx.ExecContext(ctx, tx.Rebind(`UPDATE idempotency SET claim = ?, claimed_at = ? WHERE scope = ? AND idem_key = ? AND claim = ?`),
			claim, micros(now), scope, key, row.Claim)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return fmt.Errorf("%w: a request with this key is being processed", checkpointd.ErrIdempotencyInFlight)
		}
		return nil
	})
	if err != nil || replay != nil {
		return "", replay, err
	}
	return claim, nil, nil
}

// complete stores the response of an idempotent write under its claim, in
// the write's transaction. A lost claim (taken over after the TTL) aborts
// the write: the other request owns the key now.
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
		return fmt.Errorf("%w: the claim on this key expired and was taken over", checkpointd.ErrIdempotencyInFlight)
	}
	return nil
}

// ReleaseIdempotency drops an uncompleted claim after its request failed, so
// a retry with the same key runs again instead of waiting out the TTL.
func (s *Store) ReleaseIdempotency(ctx context.Context, scope, key, claim string) error {
	return s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
		_, err := tx.ExecContext(ctx, tx.Rebind(`DELETE FROM idempotency WHERE scope = ? AND idem_key = ? AND claim = ? AND status = 0`), scope, key, claim)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		return err
	})
}

func idemAAD(scope, key string) []byte { return []byte("idempotency\x00" + scope + "\x00" + key) }

func newClaim() string {
	b := make([]byte, 12)
	rand.Read(b)
	return hex.EncodeToString(b)
}
