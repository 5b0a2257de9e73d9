package ui

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"time"

	"github.com/checkpointd/checkpointd"
)

// cookieName is the console's session cookie. Its value is a random id;
// the server keeps its digest, and the token stays on the server.
const cookieName = "checkpointd_console"

// SessionStore keeps console sessions where every replica reads them (the
// store package's methods of the same names).
type SessionStore interface {
	CreateConsoleSession(ctx context.Context, cs *checkpointd.ConsoleSession) error
	ConsoleSession(ctx context.Context, idDigest string) (*checkpointd.ConsoleSession, error)
	SeeConsoleSession(ctx context.Context, idDigest string, at time.Time) error
	ReplaceConsoleSession(ctx context.Context, cs *checkpointd.ConsoleSession, tokenHash string) error
	EndConsoleSession(ctx context.Context, idDigest string) (*checkpointd.ConsoleSession, error)
	EndIdleConsoleSessions(ctx context.Context, seenBefore time.Time, limit int) ([]checkpointd.ConsoleSession, error)
	// The sign-ins with the forge under way (oauth.go), by the digest of
	// their state.
	PutConsoleOAuthFlow(ctx context.Context, stateDigest, verifier string, at, startedBefore time.Time) error
	TakeConsoleOAuthFlow(ctx context.Context, stateDigest string, startedAfter time.Time) (string, error)
}

// consoleSession is one signed-in person, for the request under way: the
// cookie's value it came with and the session the store keeps for it.
type consoleSession struct {
	id        string // the cookie's value: never stored, never logged
	principal checkpointd.Principal
	// tokenHash is what the console's API calls authenticate with
	// (api.InProcessToken): the token itself is kept nowhere.
	tokenHash string
	// csrf is the token every form of the session carries, derived from
	// the cookie's value, so no replica needs to keep it.
	csrf string
	rec  *checkpointd.ConsoleSession
}

// operator says whether the session may act (and sees action buttons).
func (s *consoleSession) operator() bool { return s.principal.Role == checkpointd.RoleOperator }

// sessions keeps console sessions in the store by the SHA-256 of their
// cookie value, so that any replica serves them and a database dump hands
// out no cookie.
type sessions struct {
	store SessionStore
	idle  time.Duration
	now   func() time.Time
	// ended is told of every session that ends (signed out, idle, ended
	// by the forge): a minted token is revoked.
	ended func(*checkpointd.ConsoleSession)
}

// idleSweep bounds the idle sessions one sign-in ends.
const idleSweep = 100

func cookieDigest(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])
}

func randomString() string {
	b := make([]byte, 32)
	rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

func (ss *sessions) view(id string, rec *checkpointd.ConsoleSession) *consoleSession {
	mac := hmac.New(sha256.New, []byte(id))
	mac.Write([]byte("checkpointd console csrf"))
	return &consoleSession{id: id, principal: rec.Principal, tokenHash: rec.TokenHash,
		csrf: base64.RawURLEncoding.EncodeToString(mac.Sum(nil)), rec: rec}
}

func (ss *sessions) tell(rec *checkpointd.ConsoleSession) {
	if rec != nil && ss.ended != nil {
		ss.ended(rec)
	}
}

// create starts a session for the token of tokenHash (and the forge's
// grant, for a sign-in with the forge) and returns its cookie value. Idle
// sessions end first.
func (ss *sessions) create(ctx context.Context, tokenHash string, p checkpointd.Principal, forge *checkpointd.ForgeGrant) (*consoleSession, error) {
	now := ss.now()
	gone, err := ss.store.EndIdleConsoleSessions(ctx, now.Add(-ss.idle), idleSweep)
	if err != nil {
		return nil, err
	}
	for i := range gone {
		ss.tell(&gone[i])
	}
	id := randomString()
	rec := &checkpointd.ConsoleSession{IDDigest: cookieDigest(id), TokenHash: tokenHash, Principal: p, CreatedAt: now, LastSeenAt: now,
		Forge: forge}
	if err := ss.store.CreateConsoleSession(ctx, rec); err != nil {
		return nil, err
	}
	return ss.view(id, rec), nil
}

// get returns the live session of a cookie value: nil when there is none
// (or it went idle, which ends it); an error when the store cannot say.
func (ss *sessions) get(ctx context.Context, id string) (*consoleSession, error) {
	if id == "" {
		return nil, nil
	}
	rec, err := ss.store.ConsoleSession(ctx, cookieDigest(id))
	switch {
	case errors.Is(err, checkpointd.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	}
	now := ss.now()
	if rec.Idle(now, ss.idle) {
		return nil, ss.end(ctx, id)
	}
	if now.Sub(rec.LastSeenAt) >= checkpointd.ConsoleSeenInterval {
		if err := ss.store.SeeConsoleSession(ctx, rec.IDDigest, now); err != nil {
			return nil, err
		}
	}
	return ss.view(id, rec), nil
}

// replace puts a new token and principal (and grant) in the place of the
// session's, unless another request or replica replaced or ended it
// meanwhile: then nil, and the caller reads it again.
func (ss *sessions) replace(ctx context.Context, s *consoleSession, tokenHash string, p checkpointd.Principal, forge *checkpointd.ForgeGrant) (*consoleSession, error) {
	rec := *s.rec
	rec.TokenHash, rec.Principal, rec.Forge = tokenHash, p, forge
	err := ss.store.ReplaceConsoleSession(ctx, &rec, s.tokenHash)
	switch {
	case errors.Is(err, checkpointd.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return ss.view(s.id, &rec), nil
}

// end forgets a session (sign out; a token the API no longer accepts).
// It is bounded and detached from the request: a sign-out the browser
// gave up on still ends the session on the server.
func (ss *sessions) end(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	rec, err := ss.store.EndConsoleSession(ctx, cookieDigest(id))
	if err == nil {
		ss.tell(rec)
	}
	return err
}

// validCSRF compares a form's token with the session's in constant time.
func (s *consoleSession) validCSRF(r *http.Request) bool {
	got := r.PostFormValue("csrf")
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(s.csrf)) == 1
}
