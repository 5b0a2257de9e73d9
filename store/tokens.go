package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd"
)

const insertToken = `INSERT INTO api_tokens (id, name, role, scopes, hash, created_at) VALUES (?, ?, ?, ?, ?, ?)`

// CreateToken stores a new token by the hash of its secret and returns its
// metadata. Errors: ErrInvalidRequest (a name ValidateTokenName refuses),
// ErrStoreUnavailable.
func (s *Store) CreateToken(ctx context.Context, name string, role checkpointd.TokenRole, scope []string, secretHash string) (*checkpointd.Token, error) {
	if err := checkpointd.ValidateTokenName(name); err != nil {
		return nil, err
	}
	t := &checkpointd.Token{ID: checkpointd.NewID(checkpointd.PrefixToken), Name: name, Role: role, Scope: scope, CreatedAt: s.now()}
	if t.Scope == nil {
		t.Scope = []string{}
	}
	scopeJSON, _ := json.Marshal(t.Scope)
	err := s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
		_, err := tx.ExecContext(ctx, tx.Rebind(insertToken), t.ID, name, string(role), string(scopeJSON), secretHash, micros(t.CreatedAt))
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
		if err := tx.GetContext(ctx, &n, `SELECT COUNT(*) FROM api_tokens WHERE role = 'operator' AND revoked_at IS NULL`); err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
		created = true
		_, err := tx.ExecContext(ctx, tx.Rebind(insertToken), checkpointd.NewID(checkpointd.PrefixToken), name,
			string(checkpointd.RoleOperator), "[]", secretHash, micros(s.now()))
		return err
	})
	return created, err
}

type tokenRow struct {
	ID        string        `db:"id"`
	Name      string        `db:"name"`
	Role      string        `db:"role"`
	Scopes    string        `db:"scopes"`
	CreatedAt int64         `db:"created_at"`
	RevokedAt sql.NullInt64 `db:"revoked_at"`
}

func (r tokenRow) token() checkpointd.Token {
	t := checkpointd.Token{ID: r.ID, Name: r.Name, Role: checkpointd.TokenRole(r.Role),
		CreatedAt: fromMicros(r.CreatedAt), RevokedAt: fromNullMicros(r.RevokedAt), Scope: []string{}}
	_ = json.Unmarshal([]byte(r.Scopes), &t.Scope)
	return t
}

// Authenticate returns the principal of an unrevoked token by the hash of its
// secret. On PostgreSQL it may answer from the authentication cache
// (tokencache.go): a token revoked elsewhere works here for at most 1 s.
// Errors: ErrUnauthorized, ErrStoreUnavailable.
func (s *Store) Authenticate(ctx context.Context, secretHash string) (*checkpointd.Principal, error) {
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
	st, err := s.prepared(ctx, s.rdb, `SELECT id, name, role, scopes, created_at, revoked_at FROM api_tokens WHERE hash = ? AND revoked_at IS NULL`)
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
	return &checkpointd.Principal{TokenID: t.ID, Name: t.Name, Role: t.Role, Scope: t.Scope}, nil
}

// ListTokens lists every token, revoked ones included, oldest first.
func (s *Store) ListTokens(ctx context.Context) ([]checkpointd.Token, error) {
	var rows []tokenRow
	if err := s.rdb.SelectContext(ctx, &rows, `SELECT id, name, role, scopes, created_at, revoked_at FROM api_tokens ORDER BY id`); err != nil {
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
