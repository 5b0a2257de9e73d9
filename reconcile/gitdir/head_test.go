package gitdir_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/checkpointd/checkpointd/reconcile/gitdir"
)

// git builds fixtures; the package under test never runs it.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// newRepo makes a repository with one commit on branch at dir; extra
// arguments go to git init.
func newRepo(t *testing.T, dir, branch string, initArgs ...string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	git(t, filepath.Dir(dir), append(append([]string{"init", "-q", "-b", branch}, initArgs...), dir)...)
	git(t, dir, "commit", "-q", "--allow-empty", "-m", "one")
	return git(t, dir, "rev-parse", "HEAD")
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	os.RemoveAll(link)
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// read opens roots, reads path and closes them.
func read(t *testing.T, roots []string, path string) (gitdir.Head, error) {
	t.Helper()
	r := gitdir.Open(roots)
	defer r.Close()
	return r.ReadHead(path)
}

func mustRead(t *testing.T, roots []string, path string) gitdir.Head {
	t.Helper()
	h, err := read(t, roots, path)
	if err != nil {
		t.Fatalf("ReadHead(%s): %v", path, err)
	}
	return h
}

// TestReadHeadLayouts: the HEAD git itself reports, for each layout a
// work tree can have.
func TestReadHeadLayouts(t *testing.T) {
	root := t.TempDir()
	roots := []string{root}
	main := filepath.Join(root, "main")
	head := newRepo(t, root+"/main", "feature/x")

	t.Run("branch", func(t *testing.T) {
		want := gitdir.Head{Ref: "refs/heads/feature/x", Commit: head}
		if diff := cmp.Diff(want, mustRead(t, roots, main)); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
		if got := mustRead(t, roots, main+"/").Branch(); got != "feature/x" {
			t.Errorf("Branch() = %q", got)
		}
	})
	t.Run("packed refs, with tags and peeled lines", func(t *testing.T) {
		dir := filepath.Join(root, "packed")
		h := newRepo(t, dir, "main")
		git(t, dir, "tag", "-a", "-m", "annotated", "v1")
		git(t, dir, "tag", "aaa-light")
		git(t, dir, "branch", "zzz")
		git(t, dir, "pack-refs", "--all")
		if _, err := os.Stat(filepath.Join(dir, ".git", "refs", "heads", "main")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the fixture still has a loose ref: %v", err)
		}
		packed, _ := os.ReadFile(filepath.Join(dir, ".git", "packed-refs"))
		if !strings.Contains(string(packed), "\n^") {
			t.Fatalf("the fixture has no peeled line:\n%s", packed)
		}
		if got := mustRead(t, roots, dir); got.Commit != h || got.Ref != "refs/heads/main" {
			t.Errorf("packed: %+v, want %s", got, h)
		}
		// A loose ref wins over its packed line.
		git(t, dir, "commit", "-q", "--allow-empty", "-m", "two")
		if got := mustRead(t, roots, dir); got.Commit != git(t, dir, "rev-parse", "HEAD") || got.Commit == h {
			t.Errorf("loose over packed: %+v", got)
		}
	})
	t.Run("detached", func(t *testing.T) {
		dir := filepath.Join(root, "detached")
		h := newRepo(t, dir, "main")
		git(t, dir, "checkout", "-q", "--detach")
		if diff := cmp.Diff(gitdir.Head{Commit: h}, mustRead(t, roots, dir)); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("linked worktree", func(t *testing.T) {
		linked := filepath.Join(root, "linked")
		git(t, main, "worktree", "add", "-q", "-b", "other", linked)
		git(t, linked, "commit", "-q", "--allow-empty", "-m", "on other")
		want := gitdir.Head{Ref: "refs/heads/other", Commit: git(t, linked, "rev-parse", "HEAD")}
		if diff := cmp.Diff(want, mustRead(t, roots, linked)); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
		// Packed in the common directory, read through commondir.
		git(t, main, "pack-refs", "--all")
		if diff := cmp.Diff(want, mustRead(t, roots, linked)); diff != "" {
			t.Errorf("packed (-want +got):\n%s", diff)
		}
		git(t, linked, "checkout", "-q", "--detach", head)
		if diff := cmp.Diff(gitdir.Head{Commit: head}, mustRead(t, roots, linked)); diff != "" {
			t.Errorf("detached (-want +got):\n%s", diff)
		}
		// The main worktree keeps its own HEAD.
		if got := mustRead(t, roots, main); got.Ref != "refs/heads/feature/x" || got.Commit != head {
			t.Errorf("main worktree: %+v", got)
		}
	})
	t.Run("relative gitdir (a submodule)", func(t *testing.T) {
		dir := filepath.Join(root, "super", "sub")
		os.MkdirAll(filepath.Join(root, "super", ".git", "modules"), 0o755)
		h := newRepo(t, dir, "main", "--separate-git-dir", filepath.Join(root, "super", ".git", "modules", "sub"))
		write(t, filepath.Join(dir, ".git"), "gitdir: ../.git/modules/sub\n")
		if diff := cmp.Diff(gitdir.Head{Ref: "refs/heads/main", Commit: h}, mustRead(t, roots, dir)); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("SHA-256", func(t *testing.T) {
		dir := filepath.Join(root, "sha256")
		h := newRepo(t, dir, "main", "--object-format=sha256")
		if len(h) != 64 {
			t.Fatalf("fixture head %q is not SHA-256", h)
		}
		if got := mustRead(t, roots, dir); got.Commit != h {
			t.Errorf("loose: %+v, want %s", got, h)
		}
		git(t, dir, "pack-refs", "--all")
		if got := mustRead(t, roots, dir); got.Commit != h {
			t.Errorf("packed: %+v, want %s", got, h)
		}
		git(t, dir, "checkout", "-q", "--detach")
		if got := mustRead(t, roots, dir); got.Commit != h || got.Ref != "" {
			t.Errorf("detached: %+v, want %s", got, h)
		}
	})
	t.Run("symbolic ref to a symbolic ref", func(t *testing.T) {
		dir := filepath.Join(root, "symref")
		h := newRepo(t, dir, "main")
		git(t, dir, "symbolic-ref", "refs/heads/alias", "refs/heads/main")
		git(t, dir, "symbolic-ref", "HEAD", "refs/heads/alias")
		if diff := cmp.Diff(gitdir.Head{Ref: "refs/heads/alias", Commit: h}, mustRead(t, roots, dir)); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("the root through a symbolic link, and nested roots", func(t *testing.T) {
		link := filepath.Join(t.TempDir(), "agents")
		symlink(t, root, link)
		viaLink := filepath.Join(link, "main")
		for _, c := range []struct {
			roots, paths []string
		}{
			{[]string{link}, []string{main, viaLink}}, // the link and where it leads
			{[]string{root, main}, []string{main}},
			{[]string{main, link}, []string{main, viaLink}},
		} {
			for _, p := range c.paths {
				if got := mustRead(t, c.roots, p); got.Commit != head {
					t.Errorf("roots %v, path %s: %+v", c.roots, p, got)
				}
			}
		}
		// A link the operator did not name is not a way in.
		if _, err := read(t, []string{root}, viaLink); !errors.Is(err, gitdir.ErrOutsideRoots) {
			t.Errorf("through an unnamed link: %v, want ErrOutsideRoots", err)
		}
	})
}

// TestReadHeadStates: an unborn branch and the refs it cannot read are
// errors that say so; a path that is not a work tree is ErrNotWorktree.
func TestReadHeadStates(t *testing.T) {
	root := t.TempDir()
	roots := []string{root}

	unborn := filepath.Join(root, "unborn")
	git(t, root, "init", "-q", "-b", "fresh", unborn)
	if h, err := read(t, roots, unborn); !errors.Is(err, gitdir.ErrUnborn) || h.Ref != "refs/heads/fresh" {
		t.Errorf("unborn: %+v, %v; want ErrUnborn on refs/heads/fresh", h, err)
	}

	// "ref:" without its space, and trailing blanks: git reads both.
	loose := filepath.Join(root, "loose")
	h := newRepo(t, loose, "main")
	write(t, filepath.Join(loose, ".git", "HEAD"), "ref:refs/heads/main \r\n")
	if got := mustRead(t, roots, loose); got.Commit != h || got.Ref != "refs/heads/main" {
		t.Errorf("ref: without a space: %+v", got)
	}

	reftable := filepath.Join(root, "reftable")
	newRepo(t, reftable, "main")
	write(t, filepath.Join(reftable, ".git", "HEAD"), "ref: refs/heads/.invalid\n")
	if _, err := read(t, roots, reftable); !errors.Is(err, gitdir.ErrReftable) {
		t.Errorf("reftable: %v", err)
	}

	plain := filepath.Join(root, "plain")
	os.Mkdir(plain, 0o755)
	write(t, filepath.Join(root, "file"), "x")
	for _, p := range []string{plain, filepath.Join(root, "file"), filepath.Join(root, "missing"), filepath.Join(unborn, ".git")} {
		if _, err := read(t, roots, p); !errors.Is(err, gitdir.ErrNotWorktree) {
			t.Errorf("%s: %v, want ErrNotWorktree", p, err)
		}
	}
}

// TestReadHeadRefusesMalformed: contents that are not what git writes are
// errors, never a head; a ref name that would climb out of refs/ is not
// followed.
func TestReadHeadRefusesMalformed(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "w")
	h := newRepo(t, dir, "main")
	outside := t.TempDir()
	write(t, filepath.Join(outside, "ref"), h+"\n")
	for _, c := range []struct{ name, head string }{
		{"garbage", "hello\n"},
		{"short hex", h[:39] + "\n"},
		{"hex of another length", h + "ab\n"},
		{"dot-dot ref", "ref: refs/heads/../../../../" + outside + "/ref\n"},
		{"ref outside refs/", "ref: HEAD\n"},
		{"ref with a space", "ref: refs/heads/a b\n"},
		{"ref with a control character", "ref: refs/heads/a\x01b\n"},
		{"ref component starting with a dot", "ref: refs/heads/.hidden\n"},
		{"ref ending in .lock", "ref: refs/heads/main.lock\n"},
		{"empty", ""},
		{"too large", "ref: refs/heads/main\n" + strings.Repeat(" ", gitdir.MaxFileBytes)},
	} {
		write(t, filepath.Join(dir, ".git", "HEAD"), c.head)
		if got, err := read(t, []string{root}, dir); err == nil || got.Commit != "" {
			t.Errorf("%s: %+v, %v; want an error and no commit", c.name, got, err)
		}
	}
	// Symbolic refs nest at most 5 deep, and a loop ends.
	write(t, filepath.Join(dir, ".git", "HEAD"), "ref: refs/heads/loop\n")
	write(t, filepath.Join(dir, ".git", "refs", "heads", "loop"), "ref: refs/heads/loop\n")
	if _, err := read(t, []string{root}, dir); err == nil || !strings.Contains(err.Error(), "deeper") {
		t.Errorf("a symbolic ref loop: %v", err)
	}
}
