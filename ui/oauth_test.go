package ui_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/api"
	"github.com/checkpointd/checkpointd/reconcile/forgetest"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
	"github.com/checkpointd/checkpointd/ui"
)

// oauthWorld is a console with "Sign in with Gitea" against a fake forge
// (its OAuth2 provider and API), over a real store, with a clock the test
// moves.
type oauthWorld struct {
	*console
	forge *forgetest.Server
	now   atomic.Int64 // unix nanoseconds
}

func newOAuthWorld(t *testing.T) *oauthWorld {
	w := &oauthWorld{forge: forgetest.New(t)}
	w.now.Store(time.Now().UnixNano())
	s := storetest.Open(t, storetest.SQLite, checkpointd.SystemClock{})
	apiHandler := api.New(api.Deps{Store: api.StoresOf(s), Workflow: checkpointd.DefaultWorkflow(), DigestKey: []byte("0123456789abcdef0123456789abcdef")})
	var handler http.Handler
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) { handler.ServeHTTP(rw, r) }))
	t.Cleanup(srv.Close)
	// The console on localhost, the forge on 127.0.0.1: two sites, as in
	// production, so a browser treats the forge's redirect as cross-site.
	consoleURL := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
	w.forge.RegisterApp(forgetest.OAuthApp{ClientID: "cid", ClientSecret: "csecret", RedirectURI: consoleURL + "/ui/login/oauth/callback"})
	mux := http.NewServeMux()
	mux.Handle("/ui/", ui.New(ui.Deps{API: apiHandler, Authenticate: s.Authenticate, Sessions: s, Stages: checkpointd.DefaultWorkflow().Stages,
		Now: func() time.Time { return time.Unix(0, w.now.Load()) },
		OAuth: &ui.OAuth{ClientID: "cid", ClientSecret: "csecret", ForgeURL: w.forge.URL, ConsoleURL: consoleURL,
			OperatorTeams: []string{"acme/ops"}, ReaderTeams: []string{"acme/devs"},
			Mint: func(ctx context.Context, name string, role checkpointd.TokenRole, scope []string) (string, string, error) {
				secret := checkpointd.NewTokenSecret()
				tok, err := s.CreateToken(ctx, checkpointd.TokenSpec{Name: name, Role: role, Scope: scope}, checkpointd.HashToken(secret))
				if err != nil {
					return "", "", err
				}
				return tok.ID, secret, nil
			},
			Revoke: func(ctx context.Context, id string) error { return s.RevokeToken(ctx, id) }}}))
	mux.Handle("/", apiHandler)
	handler = mux
	w.console = &console{t: t, store: s, URL: consoleURL}
	w.operator = w.token(checkpointd.RoleOperator, nil)
	w.forge.AddUser(forgetest.User{Login: "root", Admin: true})
	w.forge.AddUser(forgetest.User{Login: "dana", Teams: []string{"ACME/devs"}, Repos: []string{"acme/widgets"}})
	w.forge.AddUser(forgetest.User{Login: "olaf", Teams: []string{"acme/ops"}})
	w.forge.AddUser(forgetest.User{Login: "eve", Teams: []string{"other/team"}, Repos: []string{"acme/widgets"}})
	for _, repo := range []string{"acme/widgets", "acme/gadgets"} {
		if _, err := s.CreateSession(t.Context(), store.NewSession{Repo: repo, Role: "author", Branch: "fix-1",
			Agent: checkpointd.Agent{Runtime: "claude-code", Instance: "h/1"}}); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// start begins a sign-in in hc and returns the forge's redirect back to
// the console (the callback URL with code and state).
func (w *oauthWorld) start(t *testing.T, hc *http.Client, login string) string {
	t.Helper()
	w.forge.SignIn(login)
	a := w.send(t, hc, "GET", "/ui/login/oauth", nil)
	authz, err := url.Parse(a.header.Get("Location"))
	if a.status != http.StatusSeeOther || err != nil || !strings.HasPrefix(authz.String(), w.forge.URL+"/login/oauth/authorize?") {
		t.Fatalf("start: %d %s", a.status, a.header.Get("Location"))
	}
	q := authz.Query()
	if q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("state") == "" || q.Get("redirect_uri") != w.URL+"/ui/login/oauth/callback" {
		t.Fatalf("authorize request %s", authz)
	}
	resp, err := hc.Get(authz.String())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	back := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(back, w.URL+"/ui/login/oauth/callback?") {
		t.Fatalf("the forge answered %d %s", resp.StatusCode, back)
	}
	return strings.TrimPrefix(back, w.URL)
}

func TestOAuthSignIn(t *testing.T) {
	w := newOAuthWorld(t)
	if a := w.send(t, w.client(t), "GET", "/ui/login", nil); !strings.Contains(a.body, `href="/ui/login/oauth"`) || !strings.Contains(a.body, "Sign in with Gitea") {
		t.Fatalf("the sign-in page offers no forge sign-in:\n%s", a.body)
	}
	// A reader sees the repositories they can read on the forge, no more.
	hc := w.client(t)
	a := w.send(t, hc, "GET", w.start(t, hc, "dana"), nil)
	if a.status != http.StatusOK || !strings.Contains(a.body, `http-equiv="refresh" content="0;url=/ui/?signed_in=1"`) {
		t.Fatalf("callback: %d\n%s", a.status, a.body)
	}
	fleet := w.send(t, hc, "GET", "/ui/", nil)
	if fleet.status != http.StatusOK || !strings.Contains(fleet.body, "acme/widgets") || strings.Contains(fleet.body, "acme/gadgets") {
		t.Fatalf("dana's fleet: %d\n%s", fleet.status, fleet.body)
	}
	if strings.Contains(fleet.body, ">Park<") || !strings.Contains(fleet.body, "dana") {
		t.Errorf("a reader's page: actions shown or no name")
	}
	// Replaying the callback starts nothing.
	replay := w.start(t, hc, "dana")
	w.send(t, hc, "GET", replay, nil)
	if a := w.send(t, hc, "GET", replay, nil); a.status != http.StatusForbidden || !strings.Contains(a.body, "start again") {
		t.Fatalf("a replayed callback: %d\n%s", a.status, a.body)
	}
	// Even with the state cookie put back (a callback URL and cookie both
	// stolen), a state is taken once.
	u, _ := url.Parse(w.URL)
	q, _ := url.ParseQuery(strings.SplitN(replay, "?", 2)[1])
	hc.Jar.SetCookies(u.JoinPath("/ui/login/oauth"), []*http.Cookie{{Name: "checkpointd_oauth", Value: q.Get("state"), Path: "/ui/login/oauth"}})
	if a := w.send(t, hc, "GET", replay, nil); a.status != http.StatusForbidden || !strings.Contains(a.body, "already used") {
		t.Fatalf("a replayed callback with its cookie: %d\n%s", a.status, a.body)
	}
	// A site administrator and an operator team's member are operators.
	for _, login := range []string{"root", "olaf"} {
		hc := w.client(t)
		w.send(t, hc, "GET", w.start(t, hc, login), nil)
		fleet := w.send(t, hc, "GET", "/ui/", nil)
		if !strings.Contains(fleet.body, "acme/gadgets") || !strings.Contains(fleet.body, "acme/widgets") {
			t.Fatalf("%s's fleet:\n%s", login, fleet.body)
		}
		if d := w.send(t, hc, "GET", "/ui/drain", nil); !strings.Contains(d.body, "Start drain") {
			t.Fatalf("%s is no operator:\n%s", login, d.body)
		}
	}
}

func TestOAuthRefusals(t *testing.T) {
	w := newOAuthWorld(t)
	// Someone in no allowed team.
	hc := w.client(t)
	if a := w.send(t, hc, "GET", w.start(t, hc, "eve"), nil); a.status != http.StatusForbidden || !strings.Contains(a.body, "eve is in none of the teams") {
		t.Fatalf("eve: %d\n%s", a.status, a.body)
	}
	if a := w.send(t, hc, "GET", "/ui/", nil); a.status != http.StatusSeeOther {
		t.Fatalf("eve reached the fleet: %d", a.status)
	}
	// A callback in another browser than the one that started it.
	back := w.start(t, w.client(t), "dana")
	if a := w.send(t, w.client(t), "GET", back, nil); a.status != http.StatusForbidden || !strings.Contains(a.body, "state does not match") {
		t.Fatalf("state mismatch: %d\n%s", a.status, a.body)
	}
	// A state that is not the one the code came with.
	hc = w.client(t)
	back = w.start(t, hc, "dana")
	u, _ := url.Parse(back)
	q := u.Query()
	q.Set("state", "forged")
	if a := w.send(t, hc, "GET", u.Path+"?"+q.Encode(), nil); a.status != http.StatusForbidden {
		t.Fatalf("forged state: %d\n%s", a.status, a.body)
	}
	// A code whose PKCE challenge is not the console's (an attacker's
	// code injected into the callback): the forge refuses the exchange.
	w.forge.Intercept(func(_ http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/login/oauth/authorize" {
			q := r.URL.Query()
			q.Set("code_challenge", "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM")
			r.URL.RawQuery = q.Encode()
		}
		return false
	})
	hc = w.client(t)
	if a := w.send(t, hc, "GET", w.start(t, hc, "dana"), nil); a.status != http.StatusUnauthorized || !strings.Contains(a.body, "PKCE") {
		t.Fatalf("PKCE mismatch: %d\n%s", a.status, a.body)
	}
	w.forge.Intercept(nil)
	// The forge says no.
	if a := w.send(t, w.client(t), "GET", "/ui/login/oauth/callback?error=access_denied&error_description=The+user+denied", nil); a.status != http.StatusUnauthorized || !strings.Contains(a.body, "access_denied") {
		t.Fatalf("denied: %d\n%s", a.status, a.body)
	}
}

// TestOAuthRevokedGrant: a grant revoked on the forge ends the console
// session at the next check (at most Recheck later), and the daemon token
// it acted with is revoked.
func TestOAuthRevokedGrant(t *testing.T) {
	w := newOAuthWorld(t)
	hc := w.client(t)
	w.send(t, hc, "GET", w.start(t, hc, "dana"), nil)
	if a := w.send(t, hc, "GET", "/ui/", nil); a.status != http.StatusOK {
		t.Fatalf("fleet: %d", a.status)
	}
	w.forge.RevokeGrants("dana")
	if a := w.send(t, hc, "GET", "/ui/", nil); a.status != http.StatusOK {
		t.Fatalf("within the recheck window the session stands: %d", a.status)
	}
	w.now.Add(int64(6 * time.Minute))
	if a := w.send(t, hc, "GET", "/ui/", nil); a.status != http.StatusUnauthorized || !strings.Contains(a.body, "revoked") {
		t.Fatalf("after the recheck: %d\n%s", a.status, a.body)
	}
	if a := w.send(t, hc, "GET", "/ui/", nil); a.status != http.StatusSeeOther {
		t.Fatalf("the ended session still serves: %d", a.status)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		toks, err := w.store.ListTokens(t.Context(), "", 0)
		if err != nil {
			t.Fatal(err)
		}
		live := 0
		for _, tok := range toks {
			if strings.HasPrefix(tok.Name, "console: dana") && tok.RevokedAt == nil {
				live++
			}
		}
		if live == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d console tokens of dana still valid", live)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestOAuthSignInInABrowser: Chromium follows Sign in with Gitea through
// the forge and back, across sites, and lands signed in on the fleet (the
// Strict session cookie set by the callback reaches the next page).
func TestOAuthSignInInABrowser(t *testing.T) {
	w := newOAuthWorld(t)
	ctx := browser(t)
	w.forge.SignIn("dana")
	w.forge.AskConsent()
	do(t, ctx, chromedp.Navigate(w.URL+"/ui/login"),
		chromedp.Click(`//a[normalize-space()="Sign in with Gitea"]`),
		chromedp.Click(`//a[normalize-space()="Authorize Application"]`),
		chromedp.WaitVisible(button("Sign out")))
	if loc := get(t, ctx, chromedp.Location()); loc != w.URL+"/ui/" {
		t.Fatalf("after signing in with the forge the browser is at %s", loc)
	}
	if text := get(t, ctx, chromedp.Text(chromedp.CSS(`main`))); !strings.Contains(text, "acme/widgets") || strings.Contains(text, "acme/gadgets") {
		t.Fatalf("dana's fleet in the browser: %s", text)
	}
}
