package reconcile_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/reconcile"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestWorktreeCompared: a session's worktree under a worktree root is
// compared with its checkpoint and the live head: a clean match is not
// reported; a local commit and a detached HEAD are reported — and left as
// they are; the validity still follows the forge. Paths that are not
// there, not absolute, not git work trees or outside the roots are
// skipped. Uncommitted changes are not looked for (reading them is
// running the repository's filters): a modified file is no finding.
func TestWorktreeCompared(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		e := newEnv(t, b)
		root := t.TempDir()
		e.r.WorktreeRoots = []string{root}
		dir := filepath.Join(root, "w1")
		gitIn(t, root, "init", "-q", "-b", "feature/wt", dir)
		os.WriteFile(filepath.Join(dir, "a.txt"), []byte("one\n"), 0o644)
		gitIn(t, dir, "add", "a.txt")
		gitIn(t, dir, "commit", "-q", "-m", "one")
		head := gitIn(t, dir, "rev-parse", "HEAD")
		outside := t.TempDir() // the same repository, outside the root
		gitIn(t, outside, "clone", "-q", dir, outside)
		gitIn(t, outside, "commit", "-q", "--allow-empty", "-m", "local")
		e.forge.AddRepo(1, "acme/widgets")
		e.forge.SetBranch("acme/widgets", "feature/wt", head)

		mk := func(worktree string) *checkpointd.Session {
			sess, err := e.s.CreateSession(t.Context(), store.NewSession{Repo: "acme/widgets", Role: "author", Branch: "feature/wt", Worktree: worktree})
			if err != nil {
				t.Fatal(err)
			}
			e.checkpoint(sess, head)
			return sess
		}
		sess := mk(dir)
		mk(filepath.Join(root, "missing")) // not on this host
		mk("relative/path")                // not absolute
		plain := filepath.Join(root, "plain")
		os.Mkdir(plain, 0o755)
		mk(plain)                                                        // not a git work tree
		mk(filepath.Join(dir, ".git"))                                   // the git directory, not a work tree
		mk(filepath.Join(dir, "sub"))                                    // below a work tree: only the top is read
		mk(outside)                                                      // a drifted worktree outside the roots
		mk(filepath.Join(root, "..", "x", "..", filepath.Base(outside))) // lexically outside

		rep := e.pass()
		if rep.WorktreesChecked != 1 || len(rep.Worktrees) != 0 {
			t.Fatalf("clean worktree: checked %d, reported %+v; want 1 checked, none reported", rep.WorktreesChecked, rep.Worktrees)
		}
		e.expect(sess, checkpointd.ValidityValid, "")

		// A local commit that was never pushed, and an uncommitted change.
		os.WriteFile(filepath.Join(dir, "a.txt"), []byte("two\n"), 0o644)
		gitIn(t, dir, "commit", "-q", "-am", "two")
		local := gitIn(t, dir, "rev-parse", "HEAD")
		os.WriteFile(filepath.Join(dir, "a.txt"), []byte("three\n"), 0o644)
		rep = e.pass()
		want := []reconcile.Worktree{{SessionID: sess.ID, Repo: "acme/widgets", Path: dir, Head: local, Branch: "feature/wt",
			Findings: []string{reconcile.FindingHeadDiffers, reconcile.FindingNotAtLiveHead}}}
		if diff := cmp.Diff(want, rep.Worktrees); diff != "" {
			t.Errorf("worktree report (-want +got):\n%s", diff)
		}
		e.expect(sess, checkpointd.ValidityValid, "") // the forge still has the checkpoint's head
		if got := gitIn(t, dir, "status", "--porcelain"); got != "M a.txt" || gitIn(t, dir, "rev-parse", "HEAD") != local {
			t.Errorf("reconcile touched the worktree: status %q", got)
		}
		if _, err := os.Stat(filepath.Join(dir, ".git", "index.lock")); err == nil {
			t.Errorf("reconcile left an index lock behind")
		}

		gitIn(t, dir, "checkout", "-q", "--detach")
		rep = e.pass()
		if len(rep.Worktrees) != 1 || !cmp.Equal(rep.Worktrees[0].Findings, []string{reconcile.FindingHeadDiffers,
			reconcile.FindingNotAtLiveHead, reconcile.FindingDetached}) || rep.Worktrees[0].Branch != "" {
			t.Errorf("detached worktree reported as %+v", rep.Worktrees)
		}

		gitIn(t, dir, "checkout", "-q", "-b", "other")
		rep = e.pass()
		if len(rep.Worktrees) != 1 || !cmp.Equal(rep.Worktrees[0].Findings, []string{reconcile.FindingHeadDiffers,
			reconcile.FindingNotAtLiveHead, reconcile.FindingBranchDiffers}) || rep.Worktrees[0].Branch != "other" {
			t.Errorf("worktree on another branch reported as %+v", rep.Worktrees)
		}
	})
}

// TestWorktreeNoRoots: without a worktree root nothing is looked at — not
// even a worktree that would be reported under one.
func TestWorktreeNoRoots(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	e := newEnv(t, storetest.SQLite)
	dir := t.TempDir()
	gitIn(t, dir, "init", "-q", "-b", "feature/wt")
	gitIn(t, dir, "commit", "-q", "--allow-empty", "-m", "local")
	e.forge.AddRepo(1, "acme/widgets")
	e.forge.SetBranch("acme/widgets", "feature/wt", sha(1))
	sess, err := e.s.CreateSession(t.Context(), store.NewSession{Repo: "acme/widgets", Role: "author", Branch: "feature/wt", Worktree: dir})
	if err != nil {
		t.Fatal(err)
	}
	e.checkpoint(sess, sha(1))

	for _, roots := range [][]string{nil, {}} {
		e.r.WorktreeRoots = roots
		if rep := e.pass(); rep.WorktreesChecked != 0 || len(rep.Worktrees) != 0 {
			t.Errorf("roots %q: checked %d, reported %+v; want nothing looked at", roots, rep.WorktreesChecked, rep.Worktrees)
		}
	}
	e.r.WorktreeRoots = []string{filepath.Dir(dir)}
	if rep := e.pass(); rep.WorktreesChecked != 1 || len(rep.Worktrees) != 1 {
		t.Errorf("with its root: checked %d, reported %+v; want it reported (the test proves nothing otherwise)", rep.WorktreesChecked, rep.Worktrees)
	}
}

// TestWorktreeBranchRedacted: the local branch comes from a file the
// agent wrote and goes into a stored report: one named like a secret is
// redacted there.
func TestWorktreeBranchRedacted(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	const secret = "ghp_R8kT2mQ9vX4bN7cW1zL5pH3jF6gD0sA8eY2u"
	e := newEnv(t, storetest.SQLite)
	root := t.TempDir()
	e.r.WorktreeRoots = []string{root}
	dir := filepath.Join(root, "w1")
	gitIn(t, root, "init", "-q", "-b", secret, dir)
	gitIn(t, dir, "commit", "-q", "--allow-empty", "-m", "one")
	sess, err := e.s.CreateSession(t.Context(), store.NewSession{Repo: "acme/widgets", Role: "author", Branch: "feature/wt", Worktree: dir})
	if err != nil {
		t.Fatal(err)
	}
	e.checkpoint(sess, gitIn(t, dir, "rev-parse", "HEAD"))
	rep := e.pass()
	if len(rep.Worktrees) != 1 || strings.Contains(rep.Worktrees[0].Branch, secret) || !strings.Contains(rep.Worktrees[0].Branch, "[REDACTED:") {
		t.Fatalf("worktree on a secret-shaped branch reported as %+v", rep.Worktrees)
	}
	stored, err := e.s.LastReconcileReport(t.Context())
	if err != nil || strings.Contains(string(stored), secret) {
		t.Errorf("the stored report holds the secret (%v)", err)
	}
}
