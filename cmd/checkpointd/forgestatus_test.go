package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd/reconcile/forgetest"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestServeForgeStatus: with --forge-status the daemon puts the session's
// state on its branch head as the commit status checkpointd/session,
// linking to the console; a reconcile pass that confirms the head turns it
// to success.
func TestServeForgeStatus(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		t.Parallel()
		forge := forgetest.New(t)
		forge.Token = "forge-secret-token"
		forge.AddRepo(1, "acme/widgets")
		forge.SetBranch("acme/widgets", "fix-12", checkpointHead)
		dir, dbURL := t.TempDir(), backendURL(t, b)
		env := environ{"CHECKPOINTD_GITEA_URL": forge.URL, "CHECKPOINTD_GITEA_TOKEN": forge.Token}
		args := append(storeArgs(dir, dbURL), "--reconcile-interval", "1h", "--forge-status", "--console-url", "https://cp.example")
		d := startServe(t, env, args...)
		operator := readSecret(t, tokenPath(dir))
		// The boot pass runs in the background; a session created while it
		// runs may be confirmed by it before "pending" is ever posted.
		awaitBootPass(t, d.URL, operator)
		s := newSession(t, d.URL, operator)
		call(t, "POST", d.URL+"/v1/sessions/"+s.id+"/checkpoints", operator, checkpointDoc(s, "first")).expect(t, http.StatusCreated)
		awaitStatus(t, forge, "pending", "unverified")
		if _, _, err := runCLI(t, nil, "reconcile", "--url", d.URL, "--data-dir", dir); err != nil {
			t.Fatalf("checkpointd reconcile: %v", err)
		}
		st := awaitStatus(t, forge, "success", "#1 is complete")
		if st.Context != "checkpointd/session" || st.TargetURL != "https://cp.example/ui/sessions/"+s.id {
			t.Fatalf("status %+v", st)
		}
	})
}

func awaitBootPass(t *testing.T, url, token string) {
	t.Helper()
	deadline := time.Now().Add(startTimeout)
	for call(t, "GET", url+"/v1/reconcile/last", token, nil).str("report", "trigger") != "boot" {
		if time.Now().After(deadline) {
			t.Fatalf("the boot pass did not finish within %v", startTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func awaitStatus(t *testing.T, forge *forgetest.Server, state, part string) forgetest.CommitStatus {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got := forge.Statuses("acme/widgets", checkpointHead)
		if n := len(got); n > 0 && got[n-1].State == state && strings.Contains(got[n-1].Description, part) {
			return got[n-1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("statuses %+v, want %s %q last", got, state, part)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestForgeStatusNeedsAForge: --forge-status without --gitea-url is
// refused at start, not quietly ignored.
func TestForgeStatusNeedsAForge(t *testing.T) {
	dir := t.TempDir()
	_, err := tryServe(t, environ{}, append(storeArgs(dir, ""), "--forge-status")...)
	if err == nil || !strings.Contains(err.Error(), "--gitea-url") {
		t.Fatalf("serve --forge-status without a forge: %v", err)
	}
	_, err = tryServe(t, environ{}, append(storeArgs(dir, ""), "--console-url", "javascript:alert(1)")...)
	if err == nil || !strings.Contains(err.Error(), "--console-url") {
		t.Fatalf("serve --console-url javascript:…: %v", err)
	}
}
