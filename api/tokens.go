package api

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/checkpointd/checkpointd"
)

// tokenStore administers API tokens (operators).
type tokenStore interface {
	CreateToken(ctx context.Context, spec checkpointd.TokenSpec, secretHash string) (*checkpointd.Token, error)
	ListTokens(ctx context.Context, after string, limit int) ([]checkpointd.Token, error)
	RevokeToken(ctx context.Context, id string) error
}

type createTokenRequest struct {
	Role   checkpointd.TokenRole `json:"role"`
	Name   string                `json:"name"`
	Scopes []string              `json:"scopes"`
	// ExpiresInSeconds, when set, is the token's lifetime from now.
	ExpiresInSeconds *int64 `json:"expires_in_seconds"`
}

type createdToken struct {
	Token  *checkpointd.Token `json:"token"`
	Secret string             `json:"secret"`
}

// createToken mints a token: so that, on PostgreSQL, nobody needs the
// database's credentials in a shell to make one. The secret is in this
// answer only; the store keeps its hash. An agent token must name its
// scope ("*" for every repo).
func (a *api) createToken(w http.ResponseWriter, r *http.Request) error {
	var q createTokenRequest
	if err := decode(w, r, &q); err != nil {
		return err
	}
	spec := checkpointd.TokenSpec{Role: q.Role, Name: strings.TrimSpace(q.Name), Scope: q.Scopes}
	if q.ExpiresInSeconds != nil {
		n := *q.ExpiresInSeconds
		if n < 1 || n > int64(checkpointd.MaxTokenLifetime/time.Second) {
			n = -1 // refused by Check, with the range
		}
		spec.ExpiresIn = time.Duration(n) * time.Second
	}
	if err := spec.Check(true); err != nil {
		return err
	}
	secret := checkpointd.NewTokenSecret()
	t, err := a.Store.Tokens.CreateToken(r.Context(), spec, checkpointd.HashToken(secret))
	if err != nil {
		return err
	}
	a.logAction(r, "token create", slog.String("token", t.ID), slog.String("role", string(t.Role)),
		slog.String("scopes", strings.Join(t.Scope, ",")))
	return writeJSON(w, http.StatusCreated, createdToken{Token: t, Secret: secret})
}

// listTokens lists tokens by id, revoked and expired ones too, never a
// secret nor its hash.
func (a *api) listTokens(w http.ResponseWriter, r *http.Request) error {
	limit, c, err := page(r)
	if err != nil {
		return err
	}
	items, err := a.Store.Tokens.ListTokens(r.Context(), c.ID, limit)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, newList(items, limit, func(t checkpointd.Token) cursor { return cursor{ID: t.ID} }))
}

// revokeToken revokes a token: at once on this replica, within 1 s on the
// others. 404 for an unknown or already revoked one.
func (a *api) revokeToken(w http.ResponseWriter, r *http.Request) error {
	id := chi.URLParam(r, "id")
	if err := a.Store.Tokens.RevokeToken(r.Context(), id); err != nil {
		return err
	}
	a.logAction(r, "token revoke", slog.String("token", id))
	w.WriteHeader(http.StatusNoContent)
	return nil
}
