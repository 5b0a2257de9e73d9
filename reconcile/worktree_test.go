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

// TestWorktreeCompared: a session's worktree on this host is compared with
// its checkpoint and the live head: a clean match is not reported; a local
// commit, uncommitted changes and a detached HEAD are reported — and left
// as they are; the validity still follows the forge. Paths that are not
// on this host, not absolute or not git work trees are skipped.
func TestWorktreeCompared(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		e := newEnv(t, b)
		e.r.Worktrees = true
		dir := t.TempDir()
		gitIn(t, dir, "init", "-q", "-b", "feature/wt")
		os.WriteFile(filepath.Join(dir, "a.txt"), []byte("one\n"), 0o644)
		gitIn(t, dir, "add", "a.txt")
		gitIn(t, dir, "commit", "-q", "-m", "one")
		head := gitIn(t, dir, "rev-parse", "HEAD")
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
		mk(filepath.Join(dir, "missing")) // not on this host
		mk("relative/path")               // not absolute
		mk(t.TempDir())                   // not a git work tree
		mk(filepath.Join(dir, ".git"))    // the git directory, not a work tree

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
		want := []reconcile.Worktree{{SessionID: sess.ID, Repo: "acme/widgets", Path: dir, Head: local, Branch: "feature/wt", Dirty: true,
			Findings: []string{reconcile.FindingHeadDiffers, reconcile.FindingNotAtLiveHead, reconcile.FindingDirty}}}
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
			reconcile.FindingNotAtLiveHead, reconcile.FindingDetached, reconcile.FindingDirty}) {
			t.Errorf("detached worktree reported as %+v", rep.Worktrees)
		}
	})
}
