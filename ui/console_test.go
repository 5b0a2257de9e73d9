package ui_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/ui"
)

// client is a browser-like HTTP client with a cookie jar that does not
// follow redirects, so the tests see where each answer leads.
func (c *console) client(t *testing.T) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

type answer struct {
	status int
	header http.Header
	body   string
}

func (c *console) send(t *testing.T, hc *http.Client, method, path string, form url.Values, header ...string) answer {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, c.URL+path, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}
}

// login signs hc in with token and returns the CSRF token of its pages.
func (c *console) login(t *testing.T, hc *http.Client, token string) string {
	t.Helper()
	a := c.send(t, hc, "POST", "/ui/login", url.Values{"token": {token}})
	if a.status != http.StatusSeeOther || a.header.Get("Location") != "/ui/?signed_in=1" {
		t.Fatalf("sign-in: %d %s\n%s", a.status, a.header.Get("Location"), a.body)
	}
	page := c.send(t, hc, "GET", "/ui/drain", nil)
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page.body)
	if m == nil {
		t.Fatalf("no CSRF token on the drain page:\n%s", page.body)
	}
	return m[1]
}

func TestSecurityHeadersOnEveryPage(t *testing.T) {
	c := newConsole(t)
	hc := c.client(t)
	c.login(t, hc, c.operator)
	for _, path := range []string{"/ui/login", "/ui/", "/ui/drain", "/ui/leases", "/ui/errors", "/ui/reconcile", "/ui/nope", "/ui/static/console.css"} {
		a := c.send(t, hc, "GET", path, nil)
		csp := a.header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") ||
			!strings.Contains(csp, "frame-ancestors 'none'") || strings.Contains(csp, "unsafe") {
			t.Errorf("%s: CSP %q", path, csp)
		}
		if a.header.Get("X-Frame-Options") != "DENY" || a.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: X-Frame-Options %q, X-Content-Type-Options %q", path, a.header.Get("X-Frame-Options"), a.header.Get("X-Content-Type-Options"))
		}
		if strings.Contains(a.body, "<script>") || strings.Contains(a.body, " style=") || strings.Contains(a.body, " onclick=") {
			t.Errorf("%s has inline script or style, which the CSP forbids", path)
		}
	}
}

func TestSessionCookie(t *testing.T) {
	c := newConsole(t)
	hc := c.client(t)
	a := c.send(t, hc, "POST", "/ui/login", url.Values{"token": {c.reader}})
	cookies := (&http.Response{Header: a.header}).Cookies()
	if len(cookies) != 1 {
		t.Fatalf("cookies %v", cookies)
	}
	ck := cookies[0]
	if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/ui" || ck.Secure {
		t.Errorf("cookie %+v: want HttpOnly, SameSite=Strict, Path=/ui, not Secure over plain HTTP", ck)
	}
	if strings.Contains(ck.Value, c.reader) || ck.Value == checkpointd.HashToken(c.reader) {
		t.Error("the cookie carries the token")
	}
	for _, path := range []string{"/ui/", "/ui/drain"} {
		if strings.Contains(c.send(t, hc, "GET", path, nil).body, c.reader) {
			t.Errorf("%s shows the token", path)
		}
	}
}

// TestSignInDroppedCookie: a Secure cookie on plain HTTP is dropped by the
// browser beyond localhost (here: a client that keeps no cookie; Go's
// cookie jar, like Chromium, trusts http://127.0.0.1 with one). The
// sign-in then lands back on the sign-in page, which says why and what to
// do instead of looping silently.
func TestSignInDroppedCookie(t *testing.T) {
	c := newConsoleDeps(t, 0, func(d *ui.Deps) { d.SecureCookies = true })
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	a := c.send(t, hc, "POST", "/ui/login", url.Values{"token": {c.operator}})
	if a.status != http.StatusSeeOther || a.header.Get("Location") != "/ui/?signed_in=1" {
		t.Fatalf("sign-in: %d %s", a.status, a.header.Get("Location"))
	}
	a = c.send(t, hc, "GET", a.header.Get("Location"), nil)
	if a.status != http.StatusSeeOther || a.header.Get("Location") != "/ui/login?cookie=dropped" {
		t.Fatalf("the fleet without the cookie: %d %s", a.status, a.header.Get("Location"))
	}
	page := c.send(t, hc, "GET", a.header.Get("Location"), nil)
	for _, want := range []string{"did not keep the session cookie", "plain http://", "--console-secure-cookie never"} {
		if !strings.Contains(page.body, want) {
			t.Errorf("the sign-in page does not say %q:\n%s", want, page.body)
		}
	}
	// Without the sign-in marker, a visit without a cookie says nothing.
	if a := c.send(t, hc, "GET", "/ui/", nil); a.header.Get("Location") != "/ui/login" {
		t.Errorf("a plain visit without a cookie goes to %s", a.header.Get("Location"))
	}
}

func TestSignInRefusals(t *testing.T) {
	c := newConsole(t)
	for _, tc := range []struct {
		name, token string
		status      int
		says        string
	}{
		{"empty", "", 422, "Paste a reader or operator token"},
		{"unknown", "cpd_not-a-token", 401, "not valid"},
		{"agent", c.agent, 403, "Agent tokens cannot sign in"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hc := c.client(t)
			a := c.send(t, hc, "POST", "/ui/login", url.Values{"token": {tc.token}})
			if a.status != tc.status || !strings.Contains(a.body, tc.says) || len((&http.Response{Header: a.header}).Cookies()) != 0 {
				t.Errorf("%d %q, want %d saying %q and no cookie", a.status, a.body, tc.status, tc.says)
			}
		})
	}
	hc := c.client(t)
	a := c.send(t, hc, "POST", "/ui/login", url.Values{"token": {c.reader}}, "Origin", "http://evil.example")
	if a.status != http.StatusForbidden {
		t.Errorf("a sign-in posted from another site: %d", a.status)
	}
}

// TestCSRF: a state-changing form without the session's CSRF token, with
// a wrong one, or from another origin is refused and changes nothing.
func TestCSRF(t *testing.T) {
	c := newConsole(t)
	hc := c.client(t)
	csrf := c.login(t, hc, c.operator)
	for _, tc := range []struct {
		name   string
		form   url.Values
		header []string
	}{
		{"no token", url.Values{"reason": {"forged"}}, nil},
		{"wrong token", url.Values{"reason": {"forged"}, "csrf": {"x" + csrf}}, nil},
		{"other origin", url.Values{"reason": {"forged"}, "csrf": {csrf}}, []string{"Origin", "http://evil.example"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := c.send(t, hc, "POST", "/ui/drain/start", tc.form, tc.header...)
			if a.status != http.StatusForbidden || !strings.Contains(a.body, "CSRF") {
				t.Errorf("%d %s", a.status, a.body)
			}
		})
	}
	if d, err := c.store.DrainStatus(t.Context(), storeDrainQuery()); err != nil || d.Drain != nil {
		t.Fatalf("a refused form started a drain: %+v %v", d, err)
	}
	a := c.send(t, hc, "POST", "/ui/drain/start", url.Values{"reason": {"deploy"}, "csrf": {csrf}}, "Origin", c.URL)
	if a.status != http.StatusSeeOther {
		t.Fatalf("the real form: %d %s", a.status, a.body)
	}
	if d, err := c.store.DrainStatus(t.Context(), storeDrainQuery()); err != nil || d.Drain == nil {
		t.Fatalf("the real form started no drain: %v", err)
	}
}

// TestReaderCannotAct: a reader's pages have no action buttons, and a
// reader's forged action is refused before the API is asked.
func TestReaderCannotAct(t *testing.T) {
	c := newConsole(t)
	hc := c.client(t)
	csrf := c.login(t, hc, c.reader)
	for _, path := range []string{"/ui/drain", "/ui/reconcile", "/ui/leases"} {
		body := c.send(t, hc, "GET", path, nil).body
		for _, b := range []string{">Park<", ">End<", ">Release<", ">Force-clear<", ">Start drain<", ">Complete drain<", ">Cancel drain<", ">Reconcile now<"} {
			if strings.Contains(body, b) {
				t.Errorf("%s shows %s to a reader", path, b)
			}
		}
	}
	a := c.send(t, hc, "POST", "/ui/drain/start", url.Values{"reason": {"x"}, "csrf": {csrf}})
	if a.status != http.StatusForbidden || !strings.Contains(a.body, "only an operator") {
		t.Errorf("reader starting a drain: %d %s", a.status, a.body)
	}
}

// TestRevokedTokenEndsTheSession: once the API refuses the token, the
// console session ends and leads to sign-in.
func TestRevokedTokenEndsTheSession(t *testing.T) {
	c := newConsole(t)
	hc := c.client(t)
	c.login(t, hc, c.reader)
	toks, err := c.store.ListTokens(t.Context(), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range toks {
		if tok.Role == checkpointd.RoleReader {
			if err := c.store.RevokeToken(t.Context(), tok.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	a := c.send(t, hc, "GET", "/ui/drain", nil)
	if a.status != http.StatusSeeOther || a.header.Get("Location") != "/ui/login" {
		t.Fatalf("after the revocation: %d %s", a.status, a.header.Get("Location"))
	}
	if a := c.send(t, hc, "GET", "/ui/", nil); a.header.Get("Location") != "/ui/login" {
		t.Errorf("the session outlived its token: %d", a.status)
	}
}

func storeDrainQuery() store.DrainQuery { return store.DrainQuery{Limit: 1} }

// TestFleetNextPage: the fleet's next-page link carries the cursor as a
// query, and following it shows the next sessions.
func TestFleetNextPage(t *testing.T) {
	c := newConsole(t)
	for i := 0; i < 51; i++ {
		c.startSession(t, fmt.Sprintf("b-%d", i), "h")
	}
	hc := c.client(t)
	c.login(t, hc, c.operator)
	first := c.send(t, hc, "GET", "/ui/?state=active", nil)
	m := regexp.MustCompile(`<a href="(/ui/\?[^"]+)">Next page</a>`).FindStringSubmatch(first.body)
	if m == nil || !strings.Contains(m[1], "cursor=") || !strings.Contains(m[1], "&amp;") || !strings.Contains(m[1], "state=active") || strings.Contains(m[1], "%26") {
		t.Fatalf("no next-page link with a cursor: %v", m)
	}
	next := c.send(t, hc, "GET", strings.ReplaceAll(m[1], "&amp;", "&"), nil)
	if next.status != 200 || strings.Contains(next.body, "Next page") || !strings.Contains(next.body, "1 session<") {
		t.Errorf("the second page: %d %q", next.status, next.body[:min(len(next.body), 400)])
	}
}

// TestConsoleDetails: a favicon, "1 session", the latest checkpoint's raw
// JSON with & as itself (not \u0026), and a Park button on each blocking
// row of the drain page for an operator (none for a reader).
func TestConsoleDetails(t *testing.T) {
	c := newConsole(t)
	op, reader := c.client(t), c.client(t)
	c.login(t, op, c.operator)
	c.login(t, reader, c.reader)
	if a := c.send(t, op, "GET", "/ui/static/favicon.svg", nil); a.status != 200 || a.header.Get("Content-Type") != "image/svg+xml" {
		t.Errorf("favicon: %d %s", a.status, a.header.Get("Content-Type"))
	}
	if a := c.send(t, op, "GET", "/ui/", nil); !strings.Contains(a.body, `rel="icon" href="/ui/static/favicon.svg"`) {
		t.Error("the pages name no favicon")
	}
	s := c.startSession(t, "fix-amp", "host-1/pid-1")
	doc := map[string]any{"schema_version": 1, "run_id": s.run, "fencing_token": s.token, "role": "author", "stage": "implementing",
		"identity":    map[string]any{"runtime": "claude-code"},
		"target":      map[string]any{"repo": "acme/widgets"},
		"workspace":   map[string]any{"worktree": "/w/fix-amp", "branch": "fix-amp", "head": head(1), "base": "main"},
		"next_action": map[string]any{"actor": "author", "action": "run the tests"},
		"recovery":    map[string]any{"instructions": "git fetch && make test"}}
	c.api(t, "POST", "/v1/sessions/"+s.id+"/checkpoints", c.agent, doc)
	if a := c.send(t, op, "GET", "/ui/", nil); !strings.Contains(a.body, "1 session<") && !strings.Contains(a.body, "1 session ") {
		t.Errorf("the fleet's caption does not say 1 session:\n%s", a.body)
	}
	page := c.send(t, op, "GET", "/ui/sessions/"+s.id, nil)
	if strings.Contains(page.body, `\u0026`) || !strings.Contains(page.body, "git fetch &amp;&amp; make test") {
		t.Errorf("the raw checkpoint does not show && as itself:\n%s", page.body)
	}

	c.api(t, "POST", "/v1/drain", c.operator, map[string]any{"reason": "deploy"})
	if a := c.send(t, reader, "GET", "/ui/", nil); !strings.Contains(a.body, "A drain is running") || !strings.Contains(a.body, "1 session blocks it") {
		t.Errorf("the fleet shows no draining banner:\n%s", a.body)
	}
	confirm := `action="/ui/sessions/` + s.id + `/confirm"><input type="hidden" name="action" value="park"><button type="submit">Park</button>`
	if a := c.send(t, op, "GET", "/ui/drain", nil); !strings.Contains(a.body, confirm) {
		t.Errorf("the drain page offers an operator no Park on the blocking row:\n%s", a.body)
	}
	if a := c.send(t, reader, "GET", "/ui/drain", nil); strings.Contains(a.body, ">Park</button>") || !strings.Contains(a.body, s.id) {
		t.Errorf("the drain page for a reader: a Park button, or not the blocking session:\n%s", a.body)
	}
}
