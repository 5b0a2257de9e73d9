package ui_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/api"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
	"github.com/checkpointd/checkpointd/ui"
	"github.com/checkpointd/checkpointd/webhook"
)

// chromium is where Debian's package puts the browser (.ci/run installs it).
const chromium = "/usr/bin/chromium"

// console is a daemon's API and console on one test server.
type console struct {
	t        *testing.T
	URL      string
	store    *store.Store
	operator string
	reader   string
	agent    string
	// liveRefreshes counts the pages' live refetches: each is a change
	// that reached an open page.
	liveRefreshes atomic.Int64
}

// webhookSecret signs the test's deliveries.
const webhookSecret = "console-test-secret"

func newConsole(t *testing.T) *console { return newConsoleWith(t, 0) }

// newConsoleWith is newConsole with a --run-liveness window (0: default).
func newConsoleWith(t *testing.T, liveness time.Duration) *console {
	t.Helper()
	return newConsoleDeps(t, liveness, nil)
}

// newConsoleDeps is newConsoleWith whose console's deps edit changes.
func newConsoleDeps(t *testing.T, liveness time.Duration, edit func(*ui.Deps)) *console {
	t.Helper()
	s := storetest.Open(t, storetest.SQLite, checkpointd.SystemClock{})
	s.SetRunLiveness(liveness)
	return newConsoleOn(t, s, edit)
}

// newConsoleOn serves the API and the console over s (a replica, when
// another console serves the same database).
func newConsoleOn(t *testing.T, s *store.Store, edit func(*ui.Deps)) *console {
	t.Helper()
	apiHandler := api.New(api.Deps{Store: api.StoresOf(s), Workflow: checkpointd.DefaultWorkflow(), DigestKey: []byte("0123456789abcdef0123456789abcdef"),
		Evidence: checkpointd.EvidenceSources{Webhooks: true},
		Webhook:  &webhook.Handler{Verifier: &webhook.Verifier{Secrets: [][]byte{[]byte(webhookSecret)}}, Store: s}})
	mux := http.NewServeMux()
	deps := ui.Deps{API: apiHandler, Authenticate: s.Authenticate, Sessions: s, Stages: checkpointd.DefaultWorkflow().Stages}
	if edit != nil {
		edit(&deps)
	}
	mux.Handle("/ui/", ui.New(deps))
	mux.Handle("/", apiHandler)
	c := &console{t: t, store: s}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Console-Live") != "" {
			c.liveRefreshes.Add(1) // live.js refetching the page after a change
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	c.URL = srv.URL
	c.operator = c.token(checkpointd.RoleOperator, nil)
	c.reader = c.token(checkpointd.RoleReader, []string{"acme/*"})
	c.agent = c.token(checkpointd.RoleAgent, []string{"acme/*"})
	return c
}

func (c *console) token(role checkpointd.TokenRole, scope []string) string {
	c.t.Helper()
	secret := checkpointd.NewTokenSecret()
	if _, err := c.store.CreateToken(c.t.Context(), checkpointd.TokenSpec{Name: "console-test-" + string(role), Role: role, Scope: scope}, checkpointd.HashToken(secret)); err != nil {
		c.t.Fatal(err)
	}
	return secret
}

// browser starts a headless Chromium for the test. Without one the test
// skips, except where CHECKPOINTD_TEST_REQUIRE_BROWSER=1 (.ci/run): there
// it fails.
func browser(t *testing.T) context.Context {
	t.Helper()
	if _, err := exec.LookPath(chromium); err != nil {
		if os.Getenv("CHECKPOINTD_TEST_REQUIRE_BROWSER") == "1" {
			t.Fatalf("browser tests need %s (Debian's chromium package): %v", chromium, err)
		}
		t.Skipf("no %s: browser tests skipped (apt-get install chromium)", chromium)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1440, 900))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelB := chromedp.NewContext(actx)
	ctx, cancelC := context.WithTimeout(ctx, 60*time.Second)
	t.Cleanup(func() { cancelC(); cancelB(); cancelA() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", chromium, err)
	}
	return ctx
}

// do runs steps in order, failing the test at the first error.
func do(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatal(err)
	}
}

// get runs one action and returns its value.
func get[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// button finds a button by its accessible name (its text).
func button(name string) string { return `//button[normalize-space()="` + name + `"]` }

// signIn pastes token into the login form.
func (c *console) signIn(t *testing.T, ctx context.Context, token string) {
	t.Helper()
	do(t, ctx,
		chromedp.Navigate(c.URL+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS(`input[type=password]#token`)),
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(button("Sign in")),
		chromedp.WaitVisible(button("Sign out")))
}

// screenshot saves the page under docs/console/ when CHECKPOINTD_SCREENSHOTS
// is set (the docs show them; the tests take them so they stay current).
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if os.Getenv("CHECKPOINTD_SCREENSHOTS") == "" {
		return
	}
	png := get(t, ctx, chromedp.FullScreenshot(100))
	if err := os.WriteFile(filepath.Join("..", "docs", "console", name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestSignInAndOut(t *testing.T) {
	c := newConsole(t)
	ctx := browser(t)
	// Without a session, /ui/ leads to the login page.
	do(t, ctx, chromedp.Navigate(c.URL+"/ui/"), chromedp.WaitVisible(chromedp.ID("token")))
	if loc := get(t, ctx, chromedp.Location()); !strings.HasSuffix(loc, "/ui/login") {
		t.Fatalf("/ui/ without a session is at %s", loc)
	}
	screenshot(t, ctx, "login")

	// An agent token is refused.
	do(t, ctx, chromedp.SendKeys(chromedp.ID("token"), c.agent), chromedp.Click(button("Sign in")),
		chromedp.WaitVisible(chromedp.CSS(`.error`)))
	if msg := get(t, ctx, chromedp.Text(chromedp.CSS(`.error`))); !strings.Contains(msg, "Agent tokens cannot sign in") {
		t.Errorf("agent sign-in: %q", msg)
	}

	c.signIn(t, ctx, c.reader)
	if html := get(t, ctx, chromedp.OuterHTML(chromedp.CSS(`html`))); strings.Contains(html, c.reader) {
		t.Error("the token appears in the page")
	}
	// Sign out ends the session on the server: the old cookie opens nothing.
	do(t, ctx, chromedp.Click(button("Sign out")), chromedp.WaitVisible(chromedp.ID("token")))
	do(t, ctx, chromedp.Navigate(c.URL+"/ui/"), chromedp.WaitVisible(chromedp.ID("token")))
	if loc := get(t, ctx, chromedp.Location()); !strings.HasSuffix(loc, "/ui/login") {
		t.Errorf("after sign-out /ui/ is at %s", loc)
	}
}
