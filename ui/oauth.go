package ui

import (
	"cmp"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"code.gitea.io/sdk/gitea"
	"golang.org/x/oauth2"

	"github.com/checkpointd/checkpointd"
)

// OAuth configures "Sign in with Gitea": the forge's
// OAuth2 authorization-code flow with PKCE (S256) and state. The person's
// console role comes from the forge — site administrators and members of
// OperatorTeams are operators, members of ReaderTeams readers, everyone else
// is refused — and a reader sees the repositories they can read there,
// checked at sign-in and at most every Recheck after. Operators are not
// bounded: the operator role is fleet-wide (drain, reconcile and
// force-clear act on every session), so a bounded operator would act on
// sessions they cannot see. The console acts for the person with a daemon
// token minted at sign-in (Mint) and revoked when the console session ends,
// so every page and action passes the API's own role and scope checks.
type OAuth struct {
	ClientID, ClientSecret string
	// ForgeURL is the forge's base URL (--gitea-url); ConsoleURL the
	// console's external one (--console-url): the redirect URI is
	// ConsoleURL + /ui/login/oauth/callback.
	ForgeURL, ConsoleURL       string
	OperatorTeams, ReaderTeams []string // org/team
	Mint                       func(ctx context.Context, name string, role checkpointd.TokenRole, scope []string) (tokenID, secret string, err error)
	Revoke                     func(ctx context.Context, tokenID string) error
	// HTTPClient talks to the forge (default: 10s timeout).
	HTTPClient *http.Client
	// Recheck bounds how long a person's forge access is trusted without
	// asking again (default 5m).
	Recheck time.Duration
}

// oauthCookie binds a sign-in's state to the browser that started it. It
// is Lax, not Strict: it must come back on the forge's redirect.
const oauthCookie = "checkpointd_oauth"

// oauthFlowTTL bounds how long a started sign-in may take at the forge.
const oauthFlowTTL = 10 * time.Minute

// Bounds of the lists read at sign-in: more teams or repositories than
// this is refused rather than half read.
const (
	forgePageSize  = 50
	maxTeamPages   = 10
	maxRepoPages   = 20
	forgeUserAgent = "checkpointd-console"
)

// newGrant is what a session signed in with the forge keeps of it: the
// forge's OAuth token (sealed by the store) to ask again later.
func newGrant(login string, tok *oauth2.Token, at time.Time) (*checkpointd.ForgeGrant, error) {
	b, err := json.Marshal(tok)
	if err != nil {
		return nil, err
	}
	return &checkpointd.ForgeGrant{Login: login, OAuth: b, CheckedAt: at}, nil
}

// grantToken is the forge's OAuth token a grant keeps.
func grantToken(g *checkpointd.ForgeGrant) (*oauth2.Token, error) {
	var tok oauth2.Token
	if err := json.Unmarshal(g.OAuth, &tok); err != nil {
		return nil, fmt.Errorf("the session's forge grant: %w", err)
	}
	return &tok, nil
}

// recheckLocks serialise the rechecks of one session on this replica (by
// its digest's first byte): its requests ask the forge once, not each.
// Across replicas the store's conditional replace picks one.
type recheckLocks [256]sync.Mutex

func (l *recheckLocks) of(idDigest string) *sync.Mutex {
	var b byte
	if len(idDigest) > 0 {
		b = idDigest[0] ^ idDigest[len(idDigest)-1]
	}
	return &l[b]
}

func (o *OAuth) config() *oauth2.Config {
	base := strings.TrimRight(o.ForgeURL, "/")
	return &oauth2.Config{ClientID: o.ClientID, ClientSecret: o.ClientSecret,
		// The client authenticates with Basic auth, as Gitea and Forgejo
		// take it: no second try with other credentials after a refusal.
		Endpoint: oauth2.Endpoint{AuthURL: base + "/login/oauth/authorize", TokenURL: base + "/login/oauth/access_token",
			AuthStyle: oauth2.AuthStyleInHeader},
		RedirectURL: strings.TrimRight(o.ConsoleURL, "/") + "/ui/login/oauth/callback",
		Scopes:      []string{"read:user", "read:organization", "read:repository"}}
}

func (o *OAuth) httpClient() *http.Client {
	if o.HTTPClient != nil {
		return o.HTTPClient
	}
	return &http.Client{Timeout: 10 * time.Second}
}

// startOAuth sends the browser to the forge with a fresh state and PKCE
// challenge.
func (c *console) startOAuth(w http.ResponseWriter, r *http.Request) {
	state, verifier := randomString(), oauth2.GenerateVerifier()
	now := c.Now()
	if err := c.Sessions.PutConsoleOAuthFlow(r.Context(), cookieDigest(state), verifier, now, now.Add(-oauthFlowTTL)); err != nil {
		c.render(w, r, http.StatusServiceUnavailable, "login", c.loginView("The daemon cannot reach its database right now; try again."))
		return
	}
	http.SetCookie(w, &http.Cookie{Name: oauthCookie, Value: state, Path: "/ui/login/oauth", MaxAge: int(oauthFlowTTL.Seconds()),
		HttpOnly: true, Secure: r.TLS != nil || c.SecureCookies, SameSite: http.SameSiteLaxMode})
	http.Redirect(w, r, c.OAuth.config().AuthCodeURL(state, oauth2.S256ChallengeOption(verifier)), http.StatusSeeOther)
}

// oauthCallback finishes a sign-in: the state must be the one this
// browser started, unused; the code is exchanged with its verifier; the
// forge says who the person is and what they may do.
func (c *console) oauthCallback(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: oauthCookie, Value: "", Path: "/ui/login/oauth", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteLaxMode})
	fail := func(status int, msg string) {
		c.Logger.InfoContext(r.Context(), "console sign-in with the forge refused", "reason", msg)
		c.render(w, r, status, "login", c.loginView(msg))
	}
	q := r.URL.Query()
	if e := q.Get("error"); e != "" {
		fail(http.StatusUnauthorized, "The forge did not sign you in ("+e+"): "+q.Get("error_description"))
		return
	}
	state := q.Get("state")
	ck, err := r.Cookie(oauthCookie)
	if err != nil || state == "" || subtle.ConstantTimeCompare([]byte(ck.Value), []byte(state)) != 1 {
		fail(http.StatusForbidden, "This sign-in did not start in this browser (the state does not match): start again.")
		return
	}
	verifier, err := c.Sessions.TakeConsoleOAuthFlow(r.Context(), cookieDigest(state), c.Now().Add(-oauthFlowTTL))
	switch {
	case errors.Is(err, checkpointd.ErrNotFound):
		fail(http.StatusForbidden, "This sign-in was already used or took too long: start again.")
		return
	case err != nil:
		fail(http.StatusServiceUnavailable, "The daemon cannot reach its database right now; try again.")
		return
	}
	ctx := context.WithValue(r.Context(), oauth2.HTTPClient, c.OAuth.httpClient())
	tok, err := c.OAuth.config().Exchange(ctx, q.Get("code"), oauth2.VerifierOption(verifier))
	if err != nil {
		fail(http.StatusUnauthorized, "The forge did not accept the sign-in: "+exchangeError(err))
		return
	}
	acc, err := c.forgeAccess(ctx, tok)
	var refused *accessRefused
	switch {
	case errors.As(err, &refused):
		fail(http.StatusForbidden, refused.Error())
		return
	case err != nil:
		fail(http.StatusBadGateway, "The forge could not say who you are right now: "+err.Error())
		return
	}
	grant, err := newGrant(acc.login, tok, c.Now())
	if err != nil {
		fail(http.StatusBadGateway, "The forge's answer could not be kept: "+err.Error())
		return
	}
	p, tokenHash, err := c.mint(r.Context(), acc)
	if err != nil {
		fail(http.StatusServiceUnavailable, "The daemon cannot start your session right now; try again.")
		return
	}
	s, err := c.sessions.create(r.Context(), tokenHash, p, grant)
	if err != nil {
		c.revoke(p.TokenID)
		fail(http.StatusServiceUnavailable, "The daemon cannot start your session right now; try again.")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: s.id, Path: "/ui", HttpOnly: true,
		Secure: r.TLS != nil || c.SecureCookies, SameSite: http.SameSiteStrictMode})
	c.Logger.InfoContext(r.Context(), "console sign-in with the forge", "login", acc.login, "role", string(p.Role), "repos", len(acc.scope))
	// A page, not a redirect: the Strict cookie is not sent on a redirect
	// that a navigation from the forge started; a navigation from this
	// page is same-site.
	c.render(w, r, http.StatusOK, "signedin", view{Title: "Signed in", Refresh: afterSignIn})
}

// exchangeError is what the forge said about a refused code, without the
// request it answered.
func exchangeError(err error) string {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		if re.ErrorDescription != "" {
			return re.ErrorCode + ": " + re.ErrorDescription
		}
		if re.ErrorCode != "" {
			return re.ErrorCode
		}
		return fmt.Sprintf("it answered %d", re.Response.StatusCode)
	}
	return "the forge is unreachable"
}

// mint makes the daemon token the console acts with for the person and
// returns its principal and hash: the secret itself is kept nowhere, the
// console's calls authenticate by the hash (api.InProcessToken).
func (c *console) mint(ctx context.Context, acc forgeAccess) (checkpointd.Principal, string, error) {
	id, secret, err := c.OAuth.Mint(ctx, "console: "+acc.login+" (signed in with the forge)", acc.role, acc.scope)
	if err != nil {
		return checkpointd.Principal{}, "", err
	}
	return checkpointd.Principal{TokenID: id, Name: acc.login, Role: acc.role, Scope: acc.scope}, checkpointd.HashToken(secret), nil
}

// forgeAccess is what the forge says a person may do here.
type forgeAccess struct {
	login string
	role  checkpointd.TokenRole
	scope []string // nil: every repo
}

// accessRefused is a person the forge knows whom the console does not
// admit, with why.
type accessRefused struct{ why string }

func (e *accessRefused) Error() string { return e.why }

// errGrantRevoked: the forge no longer accepts the person's token.
var errGrantRevoked = &accessRefused{"Your sign-in with the forge was revoked there: sign in again."}

// forgeAccess asks the forge, with the person's token, who they are, which
// teams they are in and, for a reader, which repositories they can read.
func (c *console) forgeAccess(ctx context.Context, tok *oauth2.Token) (forgeAccess, error) {
	hc := c.OAuth.config().Client(context.WithValue(ctx, oauth2.HTTPClient, c.OAuth.httpClient()), tok)
	g, err := gitea.NewClient(c.OAuth.ForgeURL, gitea.SetHTTPClient(hc), gitea.SetGiteaVersion(""), gitea.SetContext(ctx),
		gitea.SetUserAgent(forgeUserAgent))
	if err != nil {
		return forgeAccess{}, err
	}
	answer := func(resp *gitea.Response, err error) error {
		if resp != nil && resp.StatusCode == http.StatusUnauthorized {
			return errGrantRevoked
		}
		var re *oauth2.RetrieveError
		if errors.As(err, &re) { // a refresh the forge refused
			return errGrantRevoked
		}
		if err != nil {
			return errors.New("the forge did not answer")
		}
		return nil
	}
	me, resp, err := g.GetMyUserInfo()
	if err := answer(resp, err); err != nil {
		return forgeAccess{}, err
	}
	acc := forgeAccess{login: me.UserName, role: checkpointd.RoleReader}
	teams := map[string]bool{}
	for n := 1; ; n++ {
		if n > maxTeamPages {
			return forgeAccess{}, &accessRefused{fmt.Sprintf("%s is in more than %d teams: the console cannot read them all", me.UserName, maxTeamPages*forgePageSize)}
		}
		page, resp, err := g.ListMyTeams(&gitea.ListTeamsOptions{ListOptions: gitea.ListOptions{Page: n, PageSize: forgePageSize}})
		if err := answer(resp, err); err != nil {
			return forgeAccess{}, err
		}
		for _, t := range page {
			if t != nil && t.Organization != nil {
				teams[strings.ToLower(cmp.Or(t.Organization.UserName, t.Organization.Name)+"/"+t.Name)] = true
			}
		}
		if len(page) < forgePageSize {
			break
		}
	}
	in := func(list []string) bool {
		return slices.ContainsFunc(list, func(t string) bool { return teams[strings.ToLower(t)] })
	}
	switch {
	case me.IsAdmin || in(c.OAuth.OperatorTeams):
		acc.role = checkpointd.RoleOperator
		return acc, nil
	case !in(c.OAuth.ReaderTeams):
		return forgeAccess{}, &accessRefused{fmt.Sprintf("%s is in none of the teams allowed to use this console (operators: %s; readers: %s): ask an operator",
			me.UserName, cmp.Or(strings.Join(c.OAuth.OperatorTeams, ", "), "none"), cmp.Or(strings.Join(c.OAuth.ReaderTeams, ", "), "none"))}
	}
	for n := 1; ; n++ {
		if n > maxRepoPages {
			return forgeAccess{}, &accessRefused{fmt.Sprintf("%s can read more than %d repositories: sign in with a scoped reader token instead", me.UserName, maxRepoPages*forgePageSize)}
		}
		page, resp, err := g.ListMyRepos(gitea.ListReposOptions{ListOptions: gitea.ListOptions{Page: n, PageSize: forgePageSize}})
		if err := answer(resp, err); err != nil {
			return forgeAccess{}, err
		}
		for _, r := range page {
			if r != nil && r.FullName != "" {
				acc.scope = append(acc.scope, r.FullName)
			}
		}
		if len(page) < forgePageSize {
			break
		}
	}
	if len(acc.scope) == 0 {
		// An empty scope would mean every repository.
		return forgeAccess{}, &accessRefused{me.UserName + " can read no repository on the forge: there is nothing to show"}
	}
	return acc, nil
}

// recheck asks the forge again when the person's access is older than
// Recheck: a revoked grant or a person no longer admitted ends the
// session; a changed role or scope gets a new daemon token. false: the
// session ended (the answer is written); else the session to go on with.
func (c *console) recheck(w http.ResponseWriter, r *http.Request, s *consoleSession) (*consoleSession, bool) {
	every := cmp.Or(c.OAuth.Recheck, 5*time.Minute)
	fresh := func(s *consoleSession) bool { return s.rec.Forge == nil || c.Now().Sub(s.rec.Forge.CheckedAt) < every }
	if fresh(s) {
		return s, true
	}
	mu := c.rechecks.of(s.rec.IDDigest)
	mu.Lock()
	defer mu.Unlock()
	ended := func() (*consoleSession, bool) {
		clearCookie(w)
		http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
		return nil, false
	}
	unavailable := func(msg string) (*consoleSession, bool) {
		c.renderError(w, r, s, http.StatusServiceUnavailable, msg)
		return nil, false
	}
	for range 3 { // a replace lost to another replica reads the session again
		cur, err := c.sessions.get(r.Context(), s.id)
		switch {
		case err != nil:
			return unavailable("the daemon cannot reach its database right now; try again")
		case cur == nil:
			return ended()
		}
		if s = cur; fresh(s) {
			return s, true // renewed meanwhile, here or on another replica
		}
		g := *s.rec.Forge
		tok, err := grantToken(&g)
		if err != nil {
			_ = c.sessions.end(r.Context(), s.id)
			return ended()
		}
		ctx := context.WithValue(r.Context(), oauth2.HTTPClient, c.OAuth.httpClient())
		acc, err := c.forgeAccess(ctx, tok)
		var refused *accessRefused
		switch {
		case errors.As(err, &refused):
			_ = c.sessions.end(r.Context(), s.id)
			clearCookie(w)
			c.Logger.InfoContext(r.Context(), "console session ended by the forge", "login", g.Login, "reason", refused.Error())
			c.render(w, r, http.StatusUnauthorized, "login", c.loginView(refused.Error()))
			return nil, false
		case err != nil:
			return unavailable("the forge cannot confirm your access right now (" + err.Error() + "); try again in a moment")
		}
		g.CheckedAt = c.Now()
		p, tokenHash := s.principal, s.tokenHash
		changed := acc.role != p.Role || !slices.Equal(acc.scope, p.Scope)
		if changed {
			if p, tokenHash, err = c.mint(r.Context(), acc); err != nil {
				return unavailable("the daemon cannot renew your session right now; try again")
			}
		}
		next, err := c.sessions.replace(r.Context(), s, tokenHash, p, &g)
		if err != nil || next == nil {
			if changed {
				c.revoke(p.TokenID) // not taken: nobody holds it
			}
			if err != nil {
				return unavailable("the daemon cannot reach its database right now; try again")
			}
			continue
		}
		if changed {
			c.revoke(s.principal.TokenID)
		}
		return next, true
	}
	return ended()
}

// revoke ends a minted daemon token, in the background: sign-out does not
// wait on the store, and a revoke that fails leaves a token whose secret
// only the ended session knew.
func (c *console) revoke(tokenID string) {
	if c.OAuth == nil || tokenID == "" {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.OAuth.Revoke(ctx, tokenID); err != nil {
			c.Logger.Warn("cannot revoke a console session's token", "token_id", tokenID, "err", err)
		}
	}()
}
