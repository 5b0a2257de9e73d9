package ui_test

import (
	"database/sql"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestConsoleSessionsSurviveTheirReplica: two replicas on one database.
// A person signs in on one; the other serves their pages and takes their
// forms (the same CSRF token); signing out on the second ends the session
// on the first too. The database holds neither the cookie nor the token.
func TestConsoleSessionsSurviveTheirReplica(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		url := storetest.URL(t, b)
		a := newConsoleOn(t, storetest.OpenURL(t, url, checkpointd.SystemClock{}), nil)
		other := newConsoleOn(t, storetest.OpenURL(t, url, checkpointd.SystemClock{}), nil)
		noJar := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

		signIn := a.send(t, noJar, "POST", "/ui/login", urlValues("token", a.operator))
		cookies := (&http.Response{Header: signIn.header}).Cookies()
		if signIn.status != http.StatusSeeOther || len(cookies) != 1 {
			t.Fatalf("sign-in on a: %d %v", signIn.status, cookies)
		}
		cookie := cookies[0].Name + "=" + cookies[0].Value
		pageA := a.send(t, noJar, "GET", "/ui/drain", nil, "Cookie", cookie)
		pageB := other.send(t, noJar, "GET", "/ui/drain", nil, "Cookie", cookie)
		if pageA.status != 200 || pageB.status != 200 {
			t.Fatalf("the drain page: %d on the replica that signed in, %d on the other", pageA.status, pageB.status)
		}
		csrf := csrfOf(t, pageA.body)
		if csrfOf(t, pageB.body) != csrf {
			t.Error("the replicas give the session different CSRF tokens")
		}
		// A form from a's page, posted to the other replica.
		start := other.send(t, noJar, "POST", "/ui/drain/start", urlValues("csrf", csrf, "reason", "deploy"), "Cookie", cookie)
		if start.status != http.StatusSeeOther {
			t.Fatalf("a form posted to the other replica: %d\n%s", start.status, start.body)
		}
		if d, err := a.store.DrainStatus(t.Context(), storeDrainQuery()); err != nil || d.Drain == nil {
			t.Fatalf("the drain the other replica started: %v %+v", err, d)
		}

		driver := "postgres"
		if b == storetest.SQLite {
			driver = "sqlite"
		}
		db, err := sql.Open(driver, url)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var dump strings.Builder
		rows, err := db.Query(`SELECT id_digest, token_hash, token_id, name, role, scopes FROM console_sessions`)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for rows.Next() {
			var f [6]string
			if err := rows.Scan(&f[0], &f[1], &f[2], &f[3], &f[4], &f[5]); err != nil {
				t.Fatal(err)
			}
			dump.WriteString(strings.Join(f[:], " "))
			n++
		}
		rows.Close()
		if n != 1 || strings.Contains(dump.String(), cookies[0].Value) || strings.Contains(dump.String(), a.operator) {
			t.Errorf("console_sessions holds %d rows, or the cookie or the token: %s", n, dump.String())
		}

		out := other.send(t, noJar, "POST", "/ui/logout", urlValues("csrf", csrf), "Cookie", cookie)
		if out.status != http.StatusSeeOther {
			t.Fatalf("sign-out on the other replica: %d\n%s", out.status, out.body)
		}
		if back := a.send(t, noJar, "GET", "/ui/drain", nil, "Cookie", cookie); back.status != http.StatusSeeOther ||
			back.header.Get("Location") != "/ui/login" {
			t.Errorf("after signing out on the other replica, the first serves the session: %d %s", back.status, back.header.Get("Location"))
		}
	})
}

// csrfOf is the CSRF token a page's forms carry.
func csrfOf(t *testing.T, page string) string {
	t.Helper()
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token on the page:\n%s", page)
	}
	return m[1]
}

func urlValues(kv ...string) url.Values {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return v
}
