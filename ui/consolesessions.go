package ui

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"sync"
	"time"

	"github.com/checkpointd/checkpointd"
)

// cookieName is the console's session cookie. Its value is a random id;
// the token it stands for stays on the server.
const cookieName = "checkpointd_console"

// consoleSession is one signed-in person: the token they pasted (kept in
// memory, never sent back), what it authenticated as, and the CSRF token
// every form of theirs carries.
type consoleSession struct {
	token     string
	principal checkpointd.Principal
	csrf      string
	lastUsed  time.Time
	// forge is set for a person signed in with the forge (oauth.go).
	forge *forgeGrant
}

// operator says whether the session may act (and sees action buttons).
func (s *consoleSession) operator() bool { return s.principal.Role == checkpointd.RoleOperator }

// sessions keeps console sessions by the SHA-256 of their cookie value, so
// a memory dump does not hand out cookies. Sessions live in this replica's
// memory: a restart signs everyone out, and behind a load balancer the
// console needs sticky routing (docs/console.md).
type sessions struct {
	mu   sync.Mutex
	m    map[[32]byte]*consoleSession
	idle time.Duration
	now  func() time.Time
	// ended is told of every session that ends (signed out, idle, ended
	// by the forge), outside the lock: a minted token is revoked.
	ended func(*consoleSession)
}

func newSessions(idle time.Duration, now func() time.Time, ended func(*consoleSession)) *sessions {
	return &sessions{m: map[[32]byte]*consoleSession{}, idle: idle, now: now, ended: ended}
}

func (ss *sessions) tell(s *consoleSession) {
	if s != nil && ss.ended != nil {
		ss.ended(s)
	}
}

func randomString() string {
	b := make([]byte, 32)
	rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// create starts a session for token and returns its cookie value.
func (ss *sessions) create(token string, p checkpointd.Principal) (string, *consoleSession) {
	id := randomString()
	s := &consoleSession{token: token, principal: p, csrf: randomString(), lastUsed: ss.now()}
	ss.mu.Lock()
	gone := ss.sweep()
	ss.m[sha256.Sum256([]byte(id))] = s
	ss.mu.Unlock()
	for _, g := range gone {
		ss.tell(g)
	}
	return id, s
}

// replace puts a copy of the session of cookie value id with a new token
// and principal in its place (the forge changed what the person may do)
// and returns it; requests under way keep the old copy.
func (ss *sessions) replace(id, token string, p checkpointd.Principal) *consoleSession {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	k := sha256.Sum256([]byte(id))
	old := ss.m[k]
	if old == nil {
		return nil
	}
	s := &consoleSession{token: token, principal: p, csrf: old.csrf, lastUsed: old.lastUsed, forge: old.forge}
	ss.m[k] = s
	return s
}

// get returns the live session of a cookie value, or nil.
func (ss *sessions) get(id string) *consoleSession {
	if id == "" {
		return nil
	}
	k := sha256.Sum256([]byte(id))
	ss.mu.Lock()
	s := ss.m[k]
	if s == nil {
		ss.mu.Unlock()
		return nil
	}
	now := ss.now()
	if now.Sub(s.lastUsed) > ss.idle {
		delete(ss.m, k)
		ss.mu.Unlock()
		ss.tell(s)
		return nil
	}
	s.lastUsed = now
	ss.mu.Unlock()
	return s
}

// end forgets a session (sign out; a token the API no longer accepts).
func (ss *sessions) end(id string) {
	k := sha256.Sum256([]byte(id))
	ss.mu.Lock()
	s := ss.m[k]
	delete(ss.m, k)
	ss.mu.Unlock()
	ss.tell(s)
}

// sweep drops idle sessions and returns them; the caller holds mu.
func (ss *sessions) sweep() []*consoleSession {
	now := ss.now()
	var gone []*consoleSession
	for k, s := range ss.m {
		if now.Sub(s.lastUsed) > ss.idle {
			delete(ss.m, k)
			gone = append(gone, s)
		}
	}
	return gone
}

// validCSRF compares a form's token with the session's in constant time.
func (s *consoleSession) validCSRF(r *http.Request) bool {
	got := r.PostFormValue("csrf")
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(s.csrf)) == 1
}
