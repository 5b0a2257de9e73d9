package gitdir_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd/reconcile/gitdir"
)

// escapeFixture is a root holding a work tree, and outside it a
// repository (a drifted head) that no read may reach.
type escapeFixture struct {
	root, wt, outside, outsideHead string
}

func newEscapeFixture(t *testing.T) escapeFixture {
	t.Helper()
	base := t.TempDir()
	f := escapeFixture{root: filepath.Join(base, "root"), wt: filepath.Join(base, "root", "w"), outside: filepath.Join(base, "outside")}
	newRepo(t, f.wt, "main")
	newRepo(t, f.outside, "main")
	git(t, f.outside, "commit", "-q", "--allow-empty", "-m", "outside")
	f.outsideHead = git(t, f.outside, "rev-parse", "HEAD")
	return f
}

// refused fails unless reading path under the fixture's root is an error
// that reports nothing of the outside repository.
func (f escapeFixture) refused(t *testing.T, what, path string, want ...error) {
	t.Helper()
	h, err := read(t, []string{f.root}, path)
	switch {
	case err == nil || h.Commit != "":
		t.Errorf("%s: read %+v (outside head %s), %v; want it refused", what, h, f.outsideHead, err)
	case errors.Is(err, gitdir.ErrNotWorktree) || errors.Is(err, gitdir.ErrOutsideRoots):
		t.Errorf("%s: %v; want an error to report, not a path to skip", what, err)
	case strings.Contains(err.Error(), f.outside):
		t.Errorf("%s: the error names the outside path: %v", what, err)
	}
	for _, w := range want {
		if !errors.Is(err, w) {
			t.Errorf("%s: %v, want %v", what, err, w)
		}
	}
}

// TestReadHeadNeverLeavesTheRoots: symbolic links, "..", and .git files
// or commondir naming a directory outside the roots are refused, at every
// file read; paths outside the roots are not looked at.
func TestReadHeadNeverLeavesTheRoots(t *testing.T) {
	t.Run("the worktree is a symbolic link out", func(t *testing.T) {
		f := newEscapeFixture(t)
		symlink(t, f.outside, filepath.Join(f.root, "link"))
		f.refused(t, "link to outside", filepath.Join(f.root, "link"))
		// Relative, climbing out.
		rel, _ := filepath.Rel(f.root, f.outside)
		symlink(t, rel, filepath.Join(f.root, "rel"))
		f.refused(t, "relative link to outside", filepath.Join(f.root, "rel"))
	})
	t.Run(".git is a symbolic link out", func(t *testing.T) {
		f := newEscapeFixture(t)
		symlink(t, filepath.Join(f.outside, ".git"), filepath.Join(f.wt, ".git"))
		f.refused(t, ".git", f.wt)
	})
	for _, name := range []string{"HEAD", "refs/heads/main", "refs/heads", "refs"} {
		t.Run(name+" is a symbolic link out", func(t *testing.T) {
			f := newEscapeFixture(t)
			symlink(t, filepath.Join(f.outside, ".git", name), filepath.Join(f.wt, ".git", name))
			f.refused(t, name, f.wt)
		})
	}
	t.Run("packed-refs is a symbolic link out", func(t *testing.T) {
		f := newEscapeFixture(t)
		git(t, f.outside, "pack-refs", "--all")
		os.Remove(filepath.Join(f.wt, ".git", "refs", "heads", "main"))
		symlink(t, filepath.Join(f.outside, ".git", "packed-refs"), filepath.Join(f.wt, ".git", "packed-refs"))
		f.refused(t, "packed-refs", f.wt)
	})
	t.Run("dot-dot in the recorded path", func(t *testing.T) {
		f := newEscapeFixture(t)
		for _, p := range []string{
			f.root + "/../outside",
			f.root + "/w/../../outside",
			f.root + "/../root/../outside",
		} {
			if h, err := read(t, []string{f.root}, p); !errors.Is(err, gitdir.ErrOutsideRoots) || h.Commit != "" {
				t.Errorf("%s: %+v, %v; want ErrOutsideRoots", p, h, err)
			}
		}
		// Inside after cleaning: read.
		if _, err := read(t, []string{f.root}, f.root+"/x/../w"); err != nil {
			t.Errorf("a path that stays inside: %v", err)
		}
	})
	t.Run("gitdir names a directory outside", func(t *testing.T) {
		f := newEscapeFixture(t)
		rel, _ := filepath.Rel(f.wt, filepath.Join(f.outside, ".git"))
		os.RemoveAll(filepath.Join(f.wt, ".git"))
		for _, gd := range []string{filepath.Join(f.outside, ".git"), rel, "../../outside/.git", "/"} {
			write(t, filepath.Join(f.wt, ".git"), "gitdir: "+gd+"\n")
			f.refused(t, "gitdir: "+gd, f.wt, gitdir.ErrEscapesRoots)
		}
	})
	t.Run("commondir names a directory outside", func(t *testing.T) {
		f := newEscapeFixture(t)
		os.Remove(filepath.Join(f.wt, ".git", "refs", "heads", "main"))
		for _, cd := range []string{filepath.Join(f.outside, ".git"), "../../../outside/.git"} {
			write(t, filepath.Join(f.wt, ".git", "commondir"), cd+"\n")
			f.refused(t, "commondir: "+cd, f.wt, gitdir.ErrEscapesRoots)
		}
	})
	t.Run("a root that is itself a link is opened, but a link in it is not followed out", func(t *testing.T) {
		f := newEscapeFixture(t)
		link := filepath.Join(t.TempDir(), "agents")
		symlink(t, f.root, link)
		symlink(t, f.outside, filepath.Join(f.root, "out"))
		if h, err := read(t, []string{link}, filepath.Join(link, "out")); err == nil || h.Commit != "" {
			t.Errorf("link out of a linked root: %+v, %v", h, err)
		}
	})
	t.Run("an absolute link that stays inside is refused too", func(t *testing.T) {
		f := newEscapeFixture(t)
		symlink(t, f.wt, filepath.Join(f.root, "abs"))
		f.refused(t, "absolute link", filepath.Join(f.root, "abs"))
	})
}

// TestReadHeadNoRoots: with no roots, no path is a worktree to read.
func TestReadHeadNoRoots(t *testing.T) {
	f := newEscapeFixture(t)
	for _, roots := range [][]string{nil, {}} {
		for _, p := range []string{f.wt, f.outside, "/", "relative"} {
			if h, err := read(t, roots, p); !errors.Is(err, gitdir.ErrOutsideRoots) || h != (gitdir.Head{}) {
				t.Errorf("roots %q, %s: %+v, %v; want ErrOutsideRoots", roots, p, h, err)
			}
		}
	}
	var zero gitdir.Roots
	if _, err := zero.ReadHead(f.wt); !errors.Is(err, gitdir.ErrOutsideRoots) {
		t.Errorf("zero Roots: %v", err)
	}
}

// TestReadHeadBadRoots: a root that is not absolute or cannot be opened
// makes the worktrees under it errors, and leaves the other roots alone.
func TestReadHeadBadRoots(t *testing.T) {
	f := newEscapeFixture(t)
	missing := filepath.Join(t.TempDir(), "missing")
	r := gitdir.Open([]string{"relative", missing, f.root})
	defer r.Close()
	if _, err := r.ReadHead(filepath.Join(missing, "w")); err == nil || errors.Is(err, gitdir.ErrNotWorktree) {
		t.Errorf("under a missing root: %v, want the root's error", err)
	}
	if _, err := r.ReadHead(f.wt); err != nil {
		t.Errorf("under a good root: %v", err)
	}
}

// TestReadHeadBounded: no file an agent controls can make a read block or
// run long: a named pipe is refused at once, and big files are refused or
// read only up to the bounds.
func TestReadHeadBounded(t *testing.T) {
	t.Run("named pipes", func(t *testing.T) {
		for _, name := range []string{".git", ".git/HEAD", ".git/refs/heads/main", ".git/packed-refs", ".git/commondir"} {
			f := newEscapeFixture(t)
			if name == ".git/packed-refs" {
				os.Remove(filepath.Join(f.wt, ".git", "refs", "heads", "main"))
			}
			p := filepath.Join(f.wt, name)
			os.RemoveAll(p)
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				t.Skipf("mkfifo: %v", err)
			}
			done := make(chan error, 1)
			go func() { _, err := read(t, []string{f.root}, f.wt); done <- err }()
			select {
			case err := <-done:
				if err == nil {
					t.Errorf("%s is a named pipe: read without an error", name)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("%s is a named pipe: the read blocked", name)
			}
		}
	})
	t.Run("packed-refs too large", func(t *testing.T) {
		f := newEscapeFixture(t)
		os.Remove(filepath.Join(f.wt, ".git", "refs", "heads", "main"))
		p := filepath.Join(f.wt, ".git", "packed-refs")
		write(t, p, "")
		if err := os.Truncate(p, gitdir.MaxPackedRefsBytes+1); err != nil { // sparse: no disk used
			t.Fatal(err)
		}
		if _, err := read(t, []string{f.root}, f.wt); err == nil || !strings.Contains(err.Error(), "larger than") {
			t.Errorf("huge packed-refs: %v", err)
		}
	})
	t.Run("too many packed refs", func(t *testing.T) {
		f := newEscapeFixture(t)
		head := git(t, f.wt, "rev-parse", "HEAD")
		os.Remove(filepath.Join(f.wt, ".git", "refs", "heads", "main"))
		var b strings.Builder
		b.WriteString("# pack-refs with: peeled fully-peeled\n") // not sorted: read in order
		for i := range gitdir.MaxPackedRefs {
			b.WriteString(head + " refs/tags/t" + strings.Repeat("x", i%7) + "\n")
		}
		b.WriteString(head + " refs/heads/main\n")
		write(t, filepath.Join(f.wt, ".git", "packed-refs"), b.String())
		if _, err := read(t, []string{f.root}, f.wt); err == nil || !strings.Contains(err.Error(), "first") {
			t.Errorf("main after %d refs: %v", gitdir.MaxPackedRefs, err)
		}
	})
	t.Run("a packed line cut short", func(t *testing.T) {
		f := newEscapeFixture(t)
		head := git(t, f.wt, "rev-parse", "HEAD")
		os.Remove(filepath.Join(f.wt, ".git", "refs", "heads", "main"))
		write(t, filepath.Join(f.wt, ".git", "packed-refs"), head+" refs/heads/main") // no newline
		if h, err := read(t, []string{f.root}, f.wt); err == nil || errors.Is(err, gitdir.ErrUnborn) || h.Commit != "" {
			t.Errorf("a last line without its newline: %+v, %v; want it not trusted", h, err)
		}
	})
}

// TestReadHeadLooksBeforeItOpens: a file that is not regular is refused
// without being opened. A named pipe shows it: a writer blocked opening it
// is released the moment anything opens it for reading, as the reader
// once did with O_NONBLOCK before it checked the type (on a device, that
// open runs the driver).
func TestReadHeadLooksBeforeItOpens(t *testing.T) {
	for _, name := range []string{".git/HEAD", ".git/refs/heads/main", ".git/commondir"} {
		t.Run(name, func(t *testing.T) {
			f := newEscapeFixture(t)
			p := filepath.Join(f.wt, name)
			os.RemoveAll(p)
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				t.Skipf("mkfifo: %v", err)
			}
			opened := make(chan struct{})
			go func() {
				if w, err := os.OpenFile(p, os.O_WRONLY, 0); err == nil { // blocks until a reader opens
					w.Close()
				}
				close(opened)
			}()
			t.Cleanup(func() { // release the writer whatever happened
				if r, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
					<-opened
					r.Close()
				}
			})
			time.Sleep(100 * time.Millisecond) // the writer is in open(2)
			if _, err := read(t, []string{f.root}, f.wt); err == nil {
				t.Errorf("%s is a named pipe: read without an error", name)
			}
			select {
			case <-opened:
				t.Fatalf("%s is a named pipe: the reader opened it", name)
			case <-time.After(500 * time.Millisecond):
			}
		})
	}
}
