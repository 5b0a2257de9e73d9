package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd/reconcile/forgetest"
	"github.com/checkpointd/checkpointd/store/storetest"
)

const checkpointHead = "0123456789abcdef0123456789abcdef01234567" // checkpointDoc's head

// TestServeReconcileAcrossRestart drives the daemon: a session confirmed
// by reconcile (`checkpointd reconcile`) is valid; right after a restart it
// is unverified and not resumable, and /readyz answers although the boot
// pass hangs on the forge; once the forge answers, the boot pass confirms
// it again.
func TestServeReconcileAcrossRestart(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		t.Parallel()
		forge := forgetest.New(t)
		forge.Token = "forge-secret-token"
		forge.AddRepo(1, "acme/widgets")
		forge.SetBranch("acme/widgets", "fix-12", checkpointHead)
		dir, dbURL := t.TempDir(), backendURL(t, b)
		env := environ{"CHECKPOINTD_GITEA_URL": forge.URL, "CHECKPOINTD_GITEA_TOKEN": forge.Token}
		args := append(storeArgs(dir, dbURL), "--reconcile-interval", "1h")

		d := startServe(t, env, args...)
		operator := readSecret(t, tokenPath(dir))
		s := newSession(t, d.URL, operator)
		call(t, "POST", d.URL+"/v1/sessions/"+s.id+"/checkpoints", operator, checkpointDoc(s, "before the restart")).expect(t, http.StatusCreated)
		out, _, err := runCLI(t, nil, "reconcile", "--url", d.URL, "--data-dir", dir)
		if err != nil {
			t.Fatalf("checkpointd reconcile: %v", err)
		}
		for _, want := range []string{"sessions checked: 1", "forge calls: 1", "verdicts: valid=1", "forge: " + forge.URL} {
			if !strings.Contains(out, want) {
				t.Errorf("reconcile printed %q; want %q in it", out, want)
			}
		}
		validity(t, d.URL, operator, s.id, "valid")
		if err := d.stop(); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(d.stderr.String(), forge.Token) {
			t.Errorf("serve logged the forge token")
		}

		// The forge hangs until released: the boot pass waits on it.
		var once sync.Once
		release := make(chan struct{})
		t.Cleanup(func() { once.Do(func() { close(release) }) })
		forge.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return false
		})
		d2 := startServe(t, env, args...) // returns once /readyz answers 200
		validity(t, d2.URL, operator, s.id, "unverified")
		r := call(t, "GET", d2.URL+"/v1/sessions/"+s.id+"/resume", operator, nil).expect(t, http.StatusOK)
		if r.get("resumable") != false {
			t.Errorf("resumable right after a restart: %s", r.raw)
		}
		once.Do(func() { close(release) })
		deadline := time.Now().Add(startTimeout)
		for call(t, "GET", d2.URL+"/v1/reconcile/last", operator, nil).str("report", "trigger") != "boot" {
			if time.Now().After(deadline) {
				t.Fatalf("the boot pass did not finish within %v", startTimeout)
			}
			time.Sleep(20 * time.Millisecond)
		}
		validity(t, d2.URL, operator, s.id, "valid")
	})
}

func validity(t *testing.T, base, token, id, want string) {
	t.Helper()
	r := call(t, "GET", base+"/v1/sessions/"+id, token, nil).expect(t, http.StatusOK)
	if got := r.str("session", "validity"); got != want {
		t.Fatalf("session validity %q (%s), want %q", got, r.str("session", "validity_reason"), want)
	}
}

// TestReconcileWithoutForge: without --gitea-url the daemon serves, warns,
// and `checkpointd reconcile --json` reports that no forge is configured
// and what to set.
func TestReconcileWithoutForge(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d := startServe(t, nil, storeArgs(dir, "")...)
	if !strings.Contains(d.stderr.String(), "no --gitea-url set") {
		t.Errorf("serve did not warn about the missing forge:\n%s", d.stderr)
	}
	out, _, err := runCLI(t, environ{"CHECKPOINTD_TOKEN": readSecret(t, tokenPath(dir))}, "reconcile", "--url", d.URL, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var r struct{ Report struct{ Forge, Error string } }
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Report.Forge != "not configured" ||
		!strings.Contains(r.Report.Error, "CHECKPOINTD_GITEA_URL") {
		t.Errorf("reconcile --json printed %s (%v)", out, err)
	}
	if _, _, err := runCLI(t, nil, "reconcile", "--url", d.URL, "--token", "not-a-token"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("reconcile with a bad token: %v, want a 401", err)
	}
}

// TestServeRefusesBadForgeConfig: a forge URL that is not http(s), or that
// carries credentials, and a non-positive interval stop serve at start.
func TestServeRefusesBadForgeConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ args []string }{
		{[]string{"--gitea-url", "ftp://gitea.example.com"}},
		{[]string{"--gitea-url", "https://user:tok@gitea.example.com"}},
		{[]string{"--reconcile-interval", "0s"}},
	} {
		err := serveRefused(t, nil, append(storeArgs(t.TempDir(), ""), c.args...)...)
		if !strings.Contains(err.Error(), c.args[0]) {
			t.Errorf("serve %v: %v, want it to name %s", c.args, err, c.args[0])
		}
	}
}
