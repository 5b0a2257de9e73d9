package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd"
)

// Console sessions, kept here so that every replica serves them. The
// store keeps digests (the cookie's, the token's) and the forge's OAuth
// token sealed; deciding what is idle, and what a session may do, is the
// console's.

type consoleSessionRow struct {
	IDDigest       string         `db:"id_digest"`
	TokenHash      string         `db:"token_hash"`
	TokenID        string         `db:"token_id"`
	Name           string         `db:"name"`
	Role           string         `db:"role"`
	Scopes         string         `db:"scopes"`
	CreatedAt      int64          `db:"created_at"`
	LastSeenAt     int64          `db:"last_seen_at"`
	ForgeLogin     sql.NullString `db:"forge_login"`
	ForgeGrant     sql.NullString `db:"forge_grant"`
	ForgeCheckedAt sql.NullInt64  `db:"forge_checked_at"`
}

const consoleSessionColumns = `id_digest, token_hash, token_id, name, role, scopes, created_at, last_seen_at,
	forge_login, forge_grant, forge_checked_at`

func consoleGrantAAD(idDigest string) []byte { return []byte("console-grant\x00" + idDigest) }

// row is cs as stored, its forge grant sealed.
func (s *Store) consoleRow(cs *checkpointd.ConsoleSession) consoleSessionRow {
	scope := cs.Principal.Scope
	if scope == nil {
		scope = []string{}
	}
	scopes, _ := json.Marshal(scope)
	r := consoleSessionRow{IDDigest: cs.IDDigest, TokenHash: cs.TokenHash, TokenID: cs.Principal.TokenID, Name: cs.Principal.Name,
		Role: string(cs.Principal.Role), Scopes: string(scopes), CreatedAt: micros(cs.CreatedAt), LastSeenAt: micros(cs.LastSeenAt)}
	if g := cs.Forge; g != nil {
		r.ForgeLogin = sql.NullString{String: g.Login, Valid: true}
		r.ForgeGrant = sql.NullString{String: s.keys.Seal(g.OAuth, consoleGrantAAD(cs.IDDigest)), Valid: true}
		r.ForgeCheckedAt = sql.NullInt64{Int64: micros(g.CheckedAt), Valid: true}
	}
	return r
}

func (s *Store) consoleSession(r consoleSessionRow) (*checkpointd.ConsoleSession, error) {
	cs := &checkpointd.ConsoleSession{IDDigest: r.IDDigest, TokenHash: r.TokenHash, CreatedAt: fromMicros(r.CreatedAt),
		LastSeenAt: fromMicros(r.LastSeenAt),
		Principal:  checkpointd.Principal{TokenID: r.TokenID, Name: r.Name, Role: checkpointd.TokenRole(r.Role), Scope: []string{}}}
	_ = json.Unmarshal([]byte(r.Scopes), &cs.Principal.Scope)
	if r.ForgeLogin.Valid {
		oauth, err := s.keys.Open(r.ForgeGrant.String, consoleGrantAAD(r.IDDigest))
		if err != nil {
			return nil, fmt.Errorf("console session's forge grant: %w", err)
		}
		cs.Forge = &checkpointd.ForgeGrant{Login: r.ForgeLogin.String, OAuth: oauth, CheckedAt: fromMicros(r.ForgeCheckedAt.Int64)}
	}
	return cs, nil
}

// CreateConsoleSession stores a new console session.
func (s *Store) CreateConsoleSession(ctx context.Context, cs *checkpointd.ConsoleSession) error {
	r := s.consoleRow(cs)
	return s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
		_, err := tx.NamedExecContext(ctx, `INSERT INTO console_sessions (`+consoleSessionColumns+`) VALUES (:id_digest, :token_hash,
			:token_id, :name, :role, :scopes, :created_at, :last_seen_at, :forge_login, :forge_grant, :forge_checked_at)`, r)
		return err
	})
}

// ConsoleSession reads the session of a cookie's digest. Errors:
// ErrNotFound, ErrStoreUnavailable, ErrKey (its forge grant cannot be
// opened with the server's keys).
func (s *Store) ConsoleSession(ctx context.Context, idDigest string) (*checkpointd.ConsoleSession, error) {
	var r consoleSessionRow
	err := s.rdb.GetContext(ctx, &r, s.rdb.Rebind(`SELECT `+consoleSessionColumns+` FROM console_sessions WHERE id_digest = ?`), idDigest)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, checkpointd.ErrNotFound
	}
	if err != nil {
		return nil, s.classify(err)
	}
	return s.consoleSession(r)
}

// SeeConsoleSession notes a request of the session at at, unless one was
// noted within ConsoleSeenInterval before it (a page's many requests are
// one write a minute).
func (s *Store) SeeConsoleSession(ctx context.Context, idDigest string, at time.Time) error {
	return s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
		_, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE console_sessions SET last_seen_at = ? WHERE id_digest = ? AND last_seen_at <= ?`),
			micros(at), idDigest, micros(at.Add(-checkpointd.ConsoleSeenInterval)))
		return err
	})
}

// ReplaceConsoleSession puts cs in the place of the stored session of its
// digest, but only while that one still signs in with tokenHash: of two
// replicas renewing one session at once, one wins and the other gets
// ErrNotFound (and reads the session again). ErrNotFound too when the
// session ended.
func (s *Store) ReplaceConsoleSession(ctx context.Context, cs *checkpointd.ConsoleSession, tokenHash string) error {
	r := s.consoleRow(cs)
	return s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE console_sessions SET token_hash = ?, token_id = ?, name = ?, role = ?, scopes = ?,
			forge_login = ?, forge_grant = ?, forge_checked_at = ? WHERE id_digest = ? AND token_hash = ?`),
			r.TokenHash, r.TokenID, r.Name, r.Role, r.Scopes, r.ForgeLogin, r.ForgeGrant, r.ForgeCheckedAt, r.IDDigest, tokenHash)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return checkpointd.ErrNotFound
		}
		return nil
	})
}

// EndConsoleSession deletes the session of a cookie's digest and returns
// it (nil when there was none), so that what it held can be let go.
func (s *Store) EndConsoleSession(ctx context.Context, idDigest string) (*checkpointd.ConsoleSession, error) {
	var ended *checkpointd.ConsoleSession
	err := s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
		ended = nil
		var r consoleSessionRow
		err := tx.GetContext(ctx, &r, tx.Rebind(`SELECT `+consoleSessionColumns+` FROM console_sessions WHERE id_digest = ?`), idDigest)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, tx.Rebind(`DELETE FROM console_sessions WHERE id_digest = ?`), idDigest); err != nil {
			return err
		}
		ended, err = s.consoleSession(r)
		if err != nil {
			// Deleted all the same: a grant nobody can open holds nothing.
			ended = &checkpointd.ConsoleSession{IDDigest: r.IDDigest, TokenHash: r.TokenHash,
				Principal: checkpointd.Principal{TokenID: r.TokenID, Name: r.Name, Role: checkpointd.TokenRole(r.Role)}}
		}
		return nil
	})
	return ended, err
}

// EndIdleConsoleSessions deletes up to limit sessions last seen before
// seenBefore and returns them.
func (s *Store) EndIdleConsoleSessions(ctx context.Context, seenBefore time.Time, limit int) ([]checkpointd.ConsoleSession, error) {
	var ended []checkpointd.ConsoleSession
	err := s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
		ended = nil
		var rows []consoleSessionRow
		if err := tx.SelectContext(ctx, &rows, tx.Rebind(`SELECT `+consoleSessionColumns+` FROM console_sessions
			WHERE last_seen_at < ? ORDER BY last_seen_at LIMIT ?`), micros(seenBefore), limit); err != nil {
			return err
		}
		for _, r := range rows {
			if _, err := tx.ExecContext(ctx, tx.Rebind(`DELETE FROM console_sessions WHERE id_digest = ?`), r.IDDigest); err != nil {
				return err
			}
			cs, err := s.consoleSession(r)
			if err != nil {
				cs = &checkpointd.ConsoleSession{IDDigest: r.IDDigest, Principal: checkpointd.Principal{TokenID: r.TokenID}}
			}
			ended = append(ended, *cs)
		}
		return nil
	})
	return ended, err
}

func oauthFlowAAD(stateDigest string) []byte { return []byte("console-oauth-flow\x00" + stateDigest) }

// PutConsoleOAuthFlow keeps a sign-in with the forge under way: its
// state's digest and PKCE verifier (sealed), until one replica takes it.
// Flows started before startedBefore go first: one that old is taken by
// nobody.
func (s *Store) PutConsoleOAuthFlow(ctx context.Context, stateDigest, verifier string, at, startedBefore time.Time) error {
	sealed := s.keys.Seal([]byte(verifier), oauthFlowAAD(stateDigest))
	return s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, tx.Rebind(`DELETE FROM console_oauth_flows WHERE started_at < ?`), micros(startedBefore)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO console_oauth_flows (state_digest, verifier, started_at) VALUES (?, ?, ?)`),
			stateDigest, sealed, micros(at))
		return err
	})
}

// TakeConsoleOAuthFlow takes the flow of a state's digest once, whichever
// replica asks: its verifier, when it started at or after startedAfter.
// Errors: ErrNotFound (unknown, taken already, or too old),
// ErrStoreUnavailable.
func (s *Store) TakeConsoleOAuthFlow(ctx context.Context, stateDigest string, startedAfter time.Time) (string, error) {
	var verifier string
	err := s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
		var row struct {
			Verifier  string `db:"verifier"`
			StartedAt int64  `db:"started_at"`
		}
		err := tx.GetContext(ctx, &row, tx.Rebind(`DELETE FROM console_oauth_flows WHERE state_digest = ? RETURNING verifier, started_at`), stateDigest)
		if errors.Is(err, sql.ErrNoRows) {
			return checkpointd.ErrNotFound
		}
		if err != nil {
			return err
		}
		if fromMicros(row.StartedAt).Before(startedAfter) {
			return checkpointd.ErrNotFound
		}
		v, err := s.keys.Open(row.Verifier, oauthFlowAAD(stateDigest))
		if err != nil {
			return checkpointd.ErrNotFound // a flow nobody here can read is no flow
		}
		verifier = string(v)
		return nil
	})
	return verifier, err
}
