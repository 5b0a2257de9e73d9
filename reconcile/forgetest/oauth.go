package forgetest

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
)

// The forge's OAuth2 provider and the API a signed-in person's token
// reads, as Gitea 1.25 and Forgejo serve them: /login/oauth/authorize
// (authorization code with PKCE), /login/oauth/access_token, and
// /api/v1/user, /user/teams, /user/repos.

// User is a forge account that can sign in.
type User struct {
	Login string
	Admin bool
	Teams []string // org/team
	Repos []string // owner/name the user can read
}

// OAuthApp is the registered OAuth2 application.
type OAuthApp struct {
	ClientID, ClientSecret, RedirectURI string
}

type oauthState struct {
	mu     sync.Mutex
	app    OAuthApp
	users  map[string]User // login → user
	signIn string          // who signs in at /authorize (no login page)
	// consent shows a page whose link approves, as Gitea's "Authorize
	// Application" does, instead of approving at once: the way back then
	// starts on the forge's page, across sites.
	consent bool
	codes   map[string]grant  // code → grant, single use
	tokens  map[string]string // access token → login
}

type grant struct{ login, challenge, redirect string }

func (s *Server) oauthRoutes(mux *http.ServeMux) {
	s.oauth = &oauthState{users: map[string]User{}, codes: map[string]grant{}, tokens: map[string]string{}}
	mux.HandleFunc("GET /login/oauth/authorize", s.authorize)
	mux.HandleFunc("POST /login/oauth/access_token", s.accessToken)
	mux.HandleFunc("GET /api/v1/user", s.me)
	mux.HandleFunc("GET /api/v1/user/teams", s.myTeams)
	mux.HandleFunc("GET /api/v1/user/repos", s.myRepos)
}

// RegisterApp registers the OAuth2 application.
func (s *Server) RegisterApp(app OAuthApp) {
	s.oauth.mu.Lock()
	defer s.oauth.mu.Unlock()
	s.oauth.app = app
}

// AddUser creates or replaces a user.
func (s *Server) AddUser(u User) {
	s.oauth.mu.Lock()
	defer s.oauth.mu.Unlock()
	s.oauth.users[u.Login] = u
}

// SignIn makes login the person who approves at /login/oauth/authorize.
func (s *Server) SignIn(login string) {
	s.oauth.mu.Lock()
	defer s.oauth.mu.Unlock()
	s.oauth.signIn = login
}

// AskConsent makes /login/oauth/authorize answer with a consent page
// whose link "Authorize Application" approves.
func (s *Server) AskConsent() {
	s.oauth.mu.Lock()
	defer s.oauth.mu.Unlock()
	s.oauth.consent = true
}

// RevokeGrants revokes every access token of login, as a person does under
// Settings → Applications → Authorized OAuth2 Applications.
func (s *Server) RevokeGrants(login string) {
	s.oauth.mu.Lock()
	defer s.oauth.mu.Unlock()
	for tok, l := range s.oauth.tokens {
		if l == login {
			delete(s.oauth.tokens, tok)
		}
	}
}

func secret() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// authorize approves at once for the signed-in person and redirects back
// with a code bound to the PKCE challenge; it refuses what Gitea refuses.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	o := s.oauth
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case q.Get("client_id") != o.app.ClientID || o.app.ClientID == "":
		http.Error(w, "unknown client_id", http.StatusBadRequest)
		return
	case q.Get("redirect_uri") != o.app.RedirectURI:
		http.Error(w, "redirect_uri does not match the application's", http.StatusBadRequest)
		return
	case q.Get("response_type") != "code" || q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "":
		http.Error(w, "want response_type=code with an S256 code_challenge", http.StatusBadRequest)
		return
	}
	code := secret()
	o.codes[code] = grant{login: o.signIn, challenge: q.Get("code_challenge"), redirect: q.Get("redirect_uri")}
	back, _ := url.Parse(q.Get("redirect_uri"))
	v := back.Query()
	v.Set("code", code)
	v.Set("state", q.Get("state"))
	back.RawQuery = v.Encode()
	if o.consent {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>Authorize</title><p><a href="%s">Authorize Application</a></p>`, html.EscapeString(back.String()))
		return
	}
	http.Redirect(w, r, back.String(), http.StatusSeeOther)
}

// accessToken exchanges a code once, for the client that owns it and the
// verifier of its challenge.
func (s *Server) accessToken(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid_request"})
		return
	}
	id, sec, ok := r.BasicAuth()
	if !ok {
		id, sec = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	o := s.oauth
	o.mu.Lock()
	defer o.mu.Unlock()
	g, found := o.codes[r.PostForm.Get("code")]
	delete(o.codes, r.PostForm.Get("code"))
	sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
	switch {
	case id != o.app.ClientID || sec != o.app.ClientSecret:
		writeJSON(w, http.StatusUnauthorized, map[string]any{"error": "invalid_client", "error_description": "client authentication failed"})
	case r.PostForm.Get("grant_type") != "authorization_code" || !found || r.PostForm.Get("redirect_uri") != g.redirect:
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid_grant", "error_description": "the code is unknown, used or expired"})
	case base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge:
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid_grant", "error_description": "failed PKCE code challenge"})
	default:
		tok := secret()
		o.tokens[tok] = g.login
		writeJSON(w, http.StatusOK, map[string]any{"access_token": tok, "token_type": "bearer", "expires_in": 3600, "refresh_token": secret()})
	}
}

// bearer is the user of the request's OAuth2 access token; it answers 401
// for none or a revoked one.
func (s *Server) bearer(w http.ResponseWriter, r *http.Request) (User, bool) {
	scheme, tok, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	o := s.oauth
	o.mu.Lock()
	login, ok := o.tokens[tok]
	u := o.users[login]
	o.mu.Unlock()
	if !ok || !(strings.EqualFold(scheme, "bearer") || strings.EqualFold(scheme, "token")) {
		writeJSON(w, http.StatusUnauthorized, map[string]any{"message": "invalid username, password or token", "url": s.URL + "/api/swagger"})
		return User{}, false
	}
	return u, true
}

func (s *Server) me(w http.ResponseWriter, r *http.Request) {
	if u, ok := s.bearer(w, r); ok {
		m := userJSON()
		m["login"], m["username"], m["is_admin"] = u.Login, u.Login, u.Admin
		writeJSON(w, http.StatusOK, m)
	}
}

func (s *Server) myTeams(w http.ResponseWriter, r *http.Request) {
	u, ok := s.bearer(w, r)
	if !ok {
		return
	}
	out := []map[string]any{}
	for i, t := range page(r, u.Teams) {
		org, name, _ := strings.Cut(t, "/")
		out = append(out, map[string]any{"id": i + 1, "name": name, "description": "", "permission": "read",
			"organization":              map[string]any{"id": i + 100, "name": org, "username": org, "full_name": ""},
			"includes_all_repositories": false, "can_create_org_repo": false, "units": []string{"repo.code"}})
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) myRepos(w http.ResponseWriter, r *http.Request) {
	u, ok := s.bearer(w, r)
	if !ok {
		return
	}
	out := []map[string]any{}
	for i, full := range page(r, slices.Sorted(slices.Values(u.Repos))) {
		out = append(out, repoJSON(s.URL, repo{id: int64(i + 1), fullName: full}))
	}
	writeJSON(w, http.StatusOK, out)
}
