package main

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

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
		for _, want := range []string{"sessions checked: 1", "(0 unverified, 0 deferred to the next pass)", "forge calls: 1", "verdicts: valid=1", "forge: " + forge.URL} {
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
		awaitBootPass(t, d2.URL, operator)
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
// carries credentials, a non-positive interval and a worktree root that is
// not an absolute directory stop serve at start.
func TestServeRefusesBadForgeConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ args []string }{
		{[]string{"--gitea-url", "ftp://gitea.example.com"}},
		{[]string{"--gitea-url", "https://user:tok@gitea.example.com"}},
		{[]string{"--reconcile-interval", "0s"}},
		{[]string{"--worktree-root", "relative/dir"}},
		{[]string{"--worktree-root", "/nonexistent/checkpointd-worktrees"}},
		{[]string{"--worktree-root", "/etc/hostname"}}, // a file
	} {
		err := serveRefused(t, nil, append(storeArgs(t.TempDir(), ""), c.args...)...)
		if !strings.Contains(err.Error(), c.args[0]) {
			t.Errorf("serve %v: %v, want it to name %s", c.args, err, c.args[0])
		}
	}
}

// TestServeWorktreeRoots: --worktree-root (repeated, or comma-separated in
// CHECKPOINTD_WORKTREE_ROOT) reaches reconcile, which then compares a
// worktree recorded under a root; without one, the same worktree is not
// looked at.
func TestServeWorktreeRoots(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	root, other := t.TempDir(), t.TempDir()
	wt := filepath.Join(root, "w1")
	for _, args := range [][]string{{"init", "-q", "-b", "fix-12", wt}, {"-C", wt, "commit", "-q", "--allow-empty", "-m", "local"}} {
		cmd := exec.Command("git", args...)
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	for _, c := range []struct {
		name    string
		env     environ
		args    []string
		checked int
	}{
		{"no root", nil, nil, 0},
		{"flags", nil, []string{"--worktree-root", other, "--worktree-root", root}, 1},
		{"environment", environ{"CHECKPOINTD_WORKTREE_ROOT": other + "," + root}, nil, 1},
		{"another root only", environ{"CHECKPOINTD_WORKTREE_ROOT": other}, nil, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			d := startServe(t, c.env, append(storeArgs(dir, ""), c.args...)...)
			operator := readSecret(t, tokenPath(dir))
			s := newSession(t, d.URL, operator)
			doc := checkpointDoc(s, "worktree")
			doc["workspace"].(map[string]any)["worktree"] = wt
			call(t, "POST", d.URL+"/v1/sessions/"+s.id+"/checkpoints", operator, doc).expect(t, http.StatusCreated)
			out, _, err := runCLI(t, environ{"CHECKPOINTD_TOKEN": operator}, "reconcile", "--url", d.URL, "--json")
			if err != nil {
				t.Fatal(err)
			}
			var r struct {
				Report struct {
					WorktreesChecked int `json:"worktrees_checked"`
					Worktrees        []struct {
						Path     string
						Findings []string
					}
				}
			}
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatal(err)
			}
			if r.Report.WorktreesChecked != c.checked || len(r.Report.Worktrees) != c.checked {
				t.Fatalf("worktrees checked %d, reported %+v; want %d (the local commit is not the checkpoint's head)", r.Report.WorktreesChecked, r.Report.Worktrees, c.checked)
			}
			if c.checked == 1 && (r.Report.Worktrees[0].Path != wt || !slices.Contains(r.Report.Worktrees[0].Findings, "head_differs")) {
				t.Errorf("worktree report %+v", r.Report.Worktrees)
			}
		})
	}
}
