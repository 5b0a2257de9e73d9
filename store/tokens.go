package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd"
)

const insertToken = `INSERT INTO api_tokens (id, name, role, scopes, hash, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)`

// CreateToken stores a new token by the hash of its secret and returns its
// metadata. The spec is checked as TokenSpec.Check(false) does: whether an
// agent must name its scope is the caller's rule (the API's, not the
// bootstrap CLI's). Errors: ErrInvalidRequest, ErrStoreUnavailable.
func (s *Store) CreateToken(ctx context.Context, spec checkpointd.TokenSpec, secretHash string) (*checkpointd.Token, error) {
	if err := spec.Check(false); err != nil {
		return nil, err
	}
	t := &checkpointd.Token{ID: checkpointd.NewID(checkpointd.PrefixToken), Name: spec.Name, Role: spec.Role, Scope: spec.Scope,
		CreatedAt: s.now()}
	if t.Scope == nil {
		t.Scope = []string{}
	}
	var expires sql.NullInt64
	if spec.ExpiresIn > 0 {
		at := t.CreatedAt.Add(spec.ExpiresIn)
		t.ExpiresAt, expires = &at, sql.NullInt64{Int64: micros(at), Valid: true}
	}
	scopeJSON, _ := json.Marshal(t.Scope)
	err := s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
		_, err := tx.ExecContext(ctx, tx.Rebind(insertToken), t.ID, t.Name, string(t.Role), string(scopeJSON), secretHash, micros(t.CreatedAt), expires)
		return err
	})
	return t, err
}

// EnsureOperatorToken creates an operator token only if no unrevoked one
// exists, atomically, and reports whether it did. It is how the first start
// of an empty database bootstraps access.
func (s *Store) EnsureOperatorToken(ctx context.Context, name, secretHash string) (bool, error) {
	created := false
	err := s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
		var n int
		// The COUNT inside the write transaction is race-free on SQLite (one
		// writer); on PostgreSQL two replicas may both create one, which
		// leaves two working operator tokens and loses nothing.
		// An expired operator token counts: the bootstrap is for an empty
		// database, not a way to mint one by waiting.
		if err := tx.GetContext(ctx, &n, `SELECT COUNT(*) FROM api_tokens WHERE role = 'operator' AND revoked_at IS NULL`); err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
		created = true
		_, err := tx.ExecContext(ctx, tx.Rebind(insertToken), checkpointd.NewID(checkpointd.PrefixToken), name,
			string(checkpointd.RoleOperator), "[]", secretHash, micros(s.now()), nil)
		return err
	})
	return created, err
}

type tokenRow struct {
	ID         string        `db:"id"`
	Name       string        `db:"name"`
	Role       string        `db:"role"`
	Scopes     string        `db:"scopes"`
	CreatedAt  int64         `db:"created_at"`
	RevokedAt  sql.NullInt64 `db:"revoked_at"`
	ExpiresAt  sql.NullInt64 `db:"expires_at"`
	LastUsedAt sql.NullInt64 `db:"last_used_at"`
}

const tokenColumns = `id, name, role, scopes, created_at, revoked_at, expires_at, last_used_at`

func (r tokenRow) token() checkpointd.Token {
	t := checkpointd.Token{ID: r.ID, Name: r.Name, Role: checkpointd.TokenRole(r.Role),
		CreatedAt: fromMicros(r.CreatedAt), RevokedAt: fromNullMicros(r.RevokedAt), Scope: []string{},
		ExpiresAt: fromNullMicros(r.ExpiresAt), LastUsedAt: fromNullMicros(r.LastUsedAt)}
	_ = json.Unmarshal([]byte(r.Scopes), &t.Scope)
	return t
}

// Authenticate returns the principal of an unrevoked, unexpired token by
// the hash of its secret, and notes its use (noteTokenUse). On PostgreSQL
// it may answer from the authentication cache (tokencache.go): a token
// revoked elsewhere works here for at most 1 s; an expired one stops at
// its expiry everywhere. Errors: ErrUnauthorized, ErrStoreUnavailable.
func (s *Store) Authenticate(ctx context.Context, secretHash string) (*checkpointd.Principal, error) {
	p, err := s.lookupToken(ctx, secretHash)
	if err != nil {
		return nil, err
	}
	// The holder of the secret may learn that it expired, and when.
	if p.ExpiresAt != nil && !s.now().Before(*p.ExpiresAt) {
		return nil, fmt.Errorf("%w: the token expired at %s", checkpointd.ErrUnauthorized, p.ExpiresAt.UTC().Format(time.RFC3339))
	}
	s.noteTokenUse(ctx, p.TokenID)
	return p, nil
}

func (s *Store) lookupToken(ctx context.Context, secretHash string) (*checkpointd.Principal, error) {
	if s.url == "" {
		return s.authenticate(ctx, secretHash)
	}
	s.startTokenListener()
	sent := time.Now()
	p, gen, fill := s.tokens.lookup(secretHash, sent)
	if p != nil {
		return p, nil
	}
	p, err := s.authenticate(ctx, secretHash)
	if err == nil && fill {
		s.tokens.fill(secretHash, *p, gen, sent)
	}
	return p, err
}

// authenticate looks the token up in the database.
func (s *Store) authenticate(ctx context.Context, secretHash string) (*checkpointd.Principal, error) {
	var r tokenRow
	st, err := s.prepared(ctx, s.rdb, `SELECT `+tokenColumns+` FROM api_tokens WHERE hash = ? AND revoked_at IS NULL`)
	if err == nil {
		err = st.GetContext(ctx, &r, secretHash)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return nil, checkpointd.ErrUnauthorized
	}
	if err != nil {
		return nil, s.classify(err)
	}
	t := r.token()
	return &checkpointd.Principal{TokenID: t.ID, Name: t.Name, Role: t.Role, Scope: t.Scope, ExpiresAt: t.ExpiresAt}, nil
}

// ListTokens lists tokens by id, revoked and expired ones included: those
// after the id after ("" from the start), at most limit of them (0: all).
func (s *Store) ListTokens(ctx context.Context, after string, limit int) ([]checkpointd.Token, error) {
	q, args := `SELECT `+tokenColumns+` FROM api_tokens WHERE id > ? ORDER BY id`, []any{after}
	if limit > 0 {
		q += ` LIMIT ?`
		args = append(args, limit)
	}
	var rows []tokenRow
	if err := s.rdb.SelectContext(ctx, &rows, s.rdb.Rebind(q), args...); err != nil {
		return nil, s.classify(err)
	}
	out := make([]checkpointd.Token, len(rows))
	for i, r := range rows {
		out[i] = r.token()
	}
	return out, nil
}

// RevokeToken revokes a token by id: at once on this store, within 1 s on
// every other replica (tokencache.go). Errors: ErrNotFound,
// ErrStoreUnavailable.
func (s *Store) RevokeToken(ctx context.Context, id string) error {
	err := s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE api_tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL`), micros(s.now()), id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return checkpointd.ErrNotFound
		}
		return s.notifyRevoked(ctx, tx, id)
	})
	// Also after a failure: a commit whose answer was lost may have revoked.
	s.tokens.drop(id)
	return err
}

// tokenUseInterval is how often a token's last_used_at is written at most:
// a request a minute is enough to tell a used token from a forgotten one,
// and every request would be a write.
const tokenUseInterval = time.Minute

// tokenUse remembers when this store last wrote each token's last_used_at,
// and waits for the writes under way when the store closes.
type tokenUse struct {
	mu      sync.Mutex
	written map[string]time.Time
	closed  bool
	writing sync.WaitGroup
}

// noteTokenUse writes the token's last_used_at, in the background, when
// this store has not written it for tokenUseInterval, and only when no
// replica has (the UPDATE's condition). It is bookkeeping: the request
// never waits for it (on SQLite it would wait for the one writer), a
// failure is logged, and the next use tries again.
func (s *Store) noteTokenUse(ctx context.Context, id string) {
	now := s.now()
	u := &s.tokenUse
	u.mu.Lock()
	defer u.mu.Unlock()
	if last, ok := u.written[id]; u.closed || ok && now.Sub(last) < tokenUseInterval {
		return
	}
	if u.written == nil || len(u.written) >= tokenCacheMax {
		u.written = make(map[string]time.Time)
	}
	u.written[id] = now
	u.writing.Add(1)
	go func() {
		defer u.writing.Done()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, err := s.wdb.ExecContext(ctx, s.wdb.Rebind(`UPDATE api_tokens SET last_used_at = ?
			WHERE id = ? AND (last_used_at IS NULL OR last_used_at <= ?)`), micros(now), id, micros(now.Add(-tokenUseInterval)))
		if err != nil {
			u.mu.Lock()
			delete(u.written, id)
			u.mu.Unlock()
			s.log.Debug("store: cannot note a token's use", "token", id, "err", err)
		}
	}()
}

// closeTokenUse waits for the last_used_at writes under way; none starts
// after it.
func (s *Store) closeTokenUse() {
	u := &s.tokenUse
	u.mu.Lock()
	u.closed = true
	u.mu.Unlock()
	u.writing.Wait()
}
