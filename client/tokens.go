package client

import (
	"context"
	"iter"
	"net/http"
	"net/url"
	"time"

	"github.com/checkpointd/checkpointd"
)

// Tokens administers API tokens (operator): mint, list, revoke.
type Tokens struct{ c *Client }

// Tokens is the token API.
func (c *Client) Tokens() *Tokens { return &Tokens{c: c} }

// TokenRequest is what to mint.
type TokenRequest struct {
	Role checkpointd.TokenRole
	Name string
	// Scopes are owner/name, owner/* or checkpointd.AllRepos ("*"); an
	// agent token needs at least one.
	Scopes []string
	// ExpiresIn, when not 0, is the token's lifetime, in whole seconds.
	ExpiresIn time.Duration
}

// MintedToken is a new token and its secret, which no later answer shows.
type MintedToken struct {
	Token  checkpointd.Token `json:"token"`
	Secret string            `json:"secret"`
}

// Create mints a token. It is sent once: a retry could mint a second.
func (t *Tokens) Create(ctx context.Context, req TokenRequest) (*MintedToken, error) {
	body := map[string]any{"role": req.Role, "name": req.Name}
	if req.Scopes != nil {
		body["scopes"] = req.Scopes
	}
	if req.ExpiresIn != 0 {
		body["expires_in_seconds"] = int64(req.ExpiresIn / time.Second)
	}
	var out MintedToken
	if err := t.c.post(ctx, "/v1/tokens", body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// List reads one page of the tokens, by id, revoked and expired ones too.
func (t *Tokens) List(ctx context.Context, opts ListOptions) (*Page[checkpointd.Token], error) {
	return getPage[checkpointd.Token](ctx, t.c, "/v1/tokens", url.Values{}, opts)
}

// All walks every token.
func (t *Tokens) All(ctx context.Context, opts ListOptions) iter.Seq2[checkpointd.Token, error] {
	return walk(ctx, opts, t.List)
}

// Revoke revokes a token by id; a 404 *Error for an unknown or already
// revoked one.
func (t *Tokens) Revoke(ctx context.Context, id string) error {
	r, err := newRequest(http.MethodDelete, "/v1/tokens/"+url.PathEscape(id), nil, nil)
	if err != nil {
		return err
	}
	_, err = t.c.call(ctx, r, nil)
	return err
}
