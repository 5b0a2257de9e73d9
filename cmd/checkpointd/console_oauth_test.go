package main

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/checkpointd/checkpointd/reconcile/forgetest"
)

// TestServeConsoleOAuth: with the forge's OAuth2 application configured,
// the console offers Sign in with Gitea, which leads to the forge with the
// redirect URI under --console-url, PKCE and state.
func TestServeConsoleOAuth(t *testing.T) {
	forge := forgetest.New(t)
	dir := t.TempDir()
	env := environ{"CHECKPOINTD_GITEA_URL": forge.URL, "CHECKPOINTD_CONSOLE_OAUTH_CLIENT_SECRET": "s3cret-client"}
	d := startServe(t, env, append(storeArgs(dir, ""), "--console-url", "https://cp.example/", "--console-oauth-client-id", "cid",
		"--console-operator-teams", "acme/ops", "--console-reader-teams", "acme/devs")...)
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Get(d.URL + "/ui/login")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	resp, err = hc.Get(d.URL + "/ui/login/oauth")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, _ := url.Parse(resp.Header.Get("Location"))
	q := loc.Query()
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc.String(), forge.URL+"/login/oauth/authorize?") ||
		q.Get("redirect_uri") != "https://cp.example/ui/login/oauth/callback" || q.Get("client_id") != "cid" ||
		q.Get("code_challenge_method") != "S256" || q.Get("state") == "" {
		t.Fatalf("sign in with Gitea: %d %s", resp.StatusCode, loc)
	}
	if strings.Contains(d.stderr.String(), "s3cret-client") {
		t.Error("serve logged the OAuth client secret")
	}
}

// TestConsoleOAuthNeedsItsParts: a sign-in with the forge missing a part
// refuses the start, naming it.
func TestConsoleOAuthNeedsItsParts(t *testing.T) {
	for _, c := range []struct {
		env  environ
		args []string
		want string
	}{
		{environ{}, []string{"--console-oauth-client-id", "cid", "--console-oauth-client-secret", "x", "--console-url", "https://cp.example"}, "--gitea-url"},
		{environ{"CHECKPOINTD_GITEA_URL": "https://gitea.example"}, []string{"--console-oauth-client-id", "cid", "--console-oauth-client-secret", "x"}, "--console-url"},
		{environ{"CHECKPOINTD_GITEA_URL": "https://gitea.example"}, []string{"--console-oauth-client-id", "cid", "--console-url", "https://cp.example"}, "--console-oauth-client-secret"},
		{environ{"CHECKPOINTD_GITEA_URL": "https://gitea.example"}, []string{"--console-oauth-client-id", "cid", "--console-oauth-client-secret", "x",
			"--console-url", "https://cp.example", "--console-reader-teams", "devs"}, "org/team"},
	} {
		_, err := tryServe(t, c.env, append(storeArgs(t.TempDir(), ""), c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("serve %v: %v, want an error naming %s", c.args, err, c.want)
		}
	}
}
