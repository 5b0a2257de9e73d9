package gitdir_test

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/checkpointd/checkpointd/reconcile/gitdir"
)

var objectNameRE = regexp.MustCompile(`^([0-9a-f]{40}|[0-9a-f]{64})$`)

// FuzzReadHead writes HEAD, a loose ref, packed-refs and a ".git" file an
// agent could write, and reads them: never a panic, never a commit that is
// not an object name, never a ref outside refs/.
func FuzzReadHead(f *testing.F) {
	sha1 := "0123456789abcdef0123456789abcdef01234567"
	sha256 := sha1 + "0123456789abcdef01234567"
	f.Add("ref: refs/heads/main\n", sha1+"\n", "", "")
	f.Add("ref: refs/heads/main\n", "", "# pack-refs with: peeled fully-peeled sorted \n"+sha256+" refs/heads/main\n^"+sha256+"\n", "")
	f.Add(sha1+"\n", "", "", "")
	f.Add("ref: refs/heads/main\n", "ref: refs/heads/main\n", "", "")
	f.Add("ref: refs/heads/../../x\n", "", "", "")
	f.Add("ref: refs/heads/main\n", "", "", "gitdir: ../elsewhere\n")
	f.Add("ref: refs/heads/main\n", "", sha1+" refs/heads/main", "gitdir: /\n")
	root := f.TempDir()
	wt := filepath.Join(root, "w")
	other := filepath.Join(root, "elsewhere")
	for _, d := range []string{filepath.Join(wt, ".gitdir", "refs", "heads"), filepath.Join(other, "refs", "heads")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, head, ref, packed, dotGit string) {
		gd := filepath.Join(wt, ".gitdir")
		os.Remove(filepath.Join(wt, ".git"))
		if dotGit == "" {
			if err := os.Symlink(".gitdir", filepath.Join(wt, ".git")); err != nil {
				t.Fatal(err)
			}
		} else {
			gd = other
			write(t, filepath.Join(wt, ".git"), dotGit)
		}
		write(t, filepath.Join(gd, "HEAD"), head)
		write(t, filepath.Join(gd, "packed-refs"), packed)
		if ref == "" {
			os.Remove(filepath.Join(gd, "refs", "heads", "main"))
		} else {
			write(t, filepath.Join(gd, "refs", "heads", "main"), ref)
		}
		h, err := read(t, []string{root}, wt)
		if h.Commit != "" && !objectNameRE.MatchString(h.Commit) {
			t.Fatalf("commit %q is not an object name", h.Commit)
		}
		if h.Ref != "" && !regexp.MustCompile(`^refs/[^ \x00-\x1f]+$`).MatchString(h.Ref) {
			t.Fatalf("ref %q", h.Ref)
		}
		if err == nil && h.Commit == "" {
			t.Fatalf("no error and no commit: %+v", h)
		}
		if errors.Is(err, gitdir.ErrOutsideRoots) {
			t.Fatalf("the work tree is under the root: %v", err)
		}
	})
}
