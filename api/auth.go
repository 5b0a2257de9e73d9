package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/writefail"
)

// authStore is what authentication asks of persistence.
type authStore interface {
	Authenticate(ctx context.Context, secretHash string) (*checkpointd.Principal, error)
}

type principalKey struct{}

// tokenHashKey holds the hash of the request's token: a long-lived answer
// (the watch feed) authenticates it again while it lasts.
type tokenHashKey struct{}

// inProcessTokenKey holds the hash of the token an in-process caller acts
// with (InProcessToken).
type inProcessTokenKey struct{}

// InProcessToken returns ctx carrying the hash of a token, for a request
// served in process (internal/inproc's Transport.Context): the console
// keeps only the hash of the token a person signed in with, and its calls
// authenticate by it. No request from the network carries a context
// value, so the hash alone (in a database dump, say) authenticates
// nothing over HTTP.
func InProcessToken(ctx context.Context, tokenHash string) context.Context {
	return context.WithValue(ctx, inProcessTokenKey{}, tokenHash)
}

// authenticate resolves the bearer token to a principal. Tokens are looked
// up by hash, so the secret is never compared or stored in the clear.
func (a *api) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hash, inProcess := r.Context().Value(inProcessTokenKey{}).(string)
		if !inProcess || hash == "" {
			scheme, secret, ok := strings.Cut(r.Header.Get("Authorization"), " ")
			if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(secret) == "" {
				w.Header().Set("WWW-Authenticate", `Bearer realm="checkpointd"`)
				a.writeProblem(w, r, fmt.Errorf("%w: a bearer token is required", checkpointd.ErrUnauthorized))
				return
			}
			hash = checkpointd.HashToken(strings.TrimSpace(secret))
		}
		p, err := a.Store.Auth.Authenticate(r.Context(), hash)
		if err != nil {
			if errors.Is(err, checkpointd.ErrStoreUnavailable) {
				// A checkpoint write that fails here must still block a
				// drain: kept until its token can be looked up.
				a.noteUnauthenticatedWrite(r, hash)
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="checkpointd", error="invalid_token"`)
			a.writeProblem(w, r, err)
			return
		}
		a.Failures.Wake() // the store answers: record what waits for it
		ctx := context.WithValue(r.Context(), principalKey{}, p)
		next.ServeHTTP(w, r.WithContext(context.WithValue(ctx, tokenHashKey{}, hash)))
	})
}

// noteUnauthenticatedWrite keeps a checkpoint write whose bearer token
// could not be looked up because the store was unreachable: it is
// authenticated when the failure is recorded (writefail).
func (a *api) noteUnauthenticatedWrite(r *http.Request, tokenHash string) {
	if r.Method != http.MethodPost {
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/sessions/")
	if !ok {
		return
	}
	id, ok := strings.CutSuffix(rest, "/checkpoints")
	if !ok || !checkpointd.ValidID(id) {
		return
	}
	a.Failures.Note(r.Context(), writefail.Failure{SessionID: id, TokenHash: tokenHash, Code: "store_unavailable", At: time.Now()})
}

// require admits principals whose role grants at least role.
func (a *api) require(role checkpointd.TokenRole) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if p := principal(r); !p.Can(role) {
				a.writeProblem(w, r, fmt.Errorf("%w: this needs the %s role; the token has %s", checkpointd.ErrForbidden, role, p.Role))
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

func principal(r *http.Request) *checkpointd.Principal {
	p, _ := r.Context().Value(principalKey{}).(*checkpointd.Principal)
	if p == nil {
		return &checkpointd.Principal{}
	}
	return p
}

// inScope answers 403 when the caller's token does not cover repo.
func inScope(r *http.Request, repo string) error {
	if !principal(r).InScope(repo) {
		return checkpointd.OutOfScope()
	}
	return nil
}
