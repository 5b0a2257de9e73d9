package reconcile_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// hostileWorktree builds, under parent, a git work tree whose repository
// names a program in every place git looks for one: filters (clean,
// smudge, process) on every file, fsmonitor, every hook, ssh, askpass,
// credential helper, pager, editor, external diff, textconv, gpg — in
// .git/config, in an included file and in a per-worktree config. Each
// program, when run, creates a file named after its variant in markers.
// A tracked file is then touched so that anything reading the work tree
// has to run the clean filter to learn whether it changed.
func hostileWorktree(t *testing.T, parent, markers string) (dir, head string) {
	t.Helper()
	dir = filepath.Join(parent, "evil")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	gitIn(t, dir, "init", "-q", "-b", "feature/wt")
	files := []string{"a.txt", "b.txt", "c.txt", "d.txt"}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("one\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gitIn(t, dir, append([]string{"add"}, files...)...)
	gitIn(t, dir, "commit", "-q", "-m", "one")
	head = gitIn(t, dir, "rev-parse", "HEAD")

	prog := func(variant string) string {
		return `sh -c "touch '` + filepath.Join(markers, variant) + `'; cat"`
	}
	cfg := map[string]string{
		"filter.evil.clean":         prog("filter-clean"),
		"filter.evil.smudge":        prog("filter-smudge"),
		"filter.evil.required":      "true",
		"filter.evilproc.process":   prog("filter-process"),
		"core.fsmonitor":            prog("fsmonitor"),
		"core.sshCommand":           prog("ssh-command"),
		"core.askPass":              prog("askpass"),
		"core.pager":                prog("pager"),
		"core.editor":               prog("editor"),
		"credential.helper":         "!" + prog("credential-helper"),
		"diff.external":             prog("diff-external"),
		"diff.evil.textconv":        prog("textconv"),
		"gpg.program":               prog("gpg"),
		"core.hooksPath":            filepath.Join(dir, ".git", "evilhooks"),
		"extensions.worktreeConfig": "true",
		"include.path":              filepath.Join(dir, ".git", "included.config"),
	}
	for k, v := range cfg {
		gitIn(t, dir, "config", k, v)
	}
	// In a config file, ";" starts a comment unless quoted, and a double
	// quote inside quotes is written \".
	included := "[filter \"evilinc\"]\n\tclean = \"" + strings.ReplaceAll(prog("included-filter-clean"), `"`, `\"`) + "\"\n"
	if err := os.WriteFile(filepath.Join(dir, ".git", "included.config"), []byte(included), 0o644); err != nil {
		t.Fatal(err)
	}
	gitIn(t, dir, "config", "--worktree", "filter.evilwt.clean", prog("worktree-config-filter-clean"))
	attrs := "* filter=evil diff=evil\nb.txt filter=evilproc\nc.txt filter=evilinc\n"
	if err := os.WriteFile(filepath.Join(dir, ".gitattributes"), []byte(attrs), 0o644); err != nil {
		t.Fatal(err)
	}
	// .git/info/attributes applies without being committed.
	if err := os.WriteFile(filepath.Join(dir, ".git", "info", "attributes"), []byte("d.txt filter=evilwt\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, hooks := range []string{filepath.Join(dir, ".git", "hooks"), filepath.Join(dir, ".git", "evilhooks")} {
		if err := os.MkdirAll(hooks, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, h := range []string{"post-index-change", "pre-commit", "post-checkout", "reference-transaction", "fsmonitor-watchman", "pre-auto-gc"} {
			script := "#!/bin/sh\ntouch '" + filepath.Join(markers, "hook-"+h) + "'\n"
			if err := os.WriteFile(filepath.Join(hooks, h), []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Same size, new mtime: only the content (through the filters) can
	// tell git whether the files changed.
	later := time.Now().Add(time.Hour)
	for _, f := range files {
		if err := os.Chtimes(filepath.Join(dir, f), later, later); err != nil {
			t.Fatal(err)
		}
	}
	return dir, head
}

// noMarkers fails for every program of the hostile worktree that ran.
func noMarkers(t *testing.T, markers string) {
	t.Helper()
	ran, err := os.ReadDir(markers)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range ran {
		names = append(names, m.Name())
	}
	if len(names) > 0 {
		t.Errorf("reconcile ran programs the worktree's repository names: %s", strings.Join(names, ", "))
	}
}

// TestWorktreeRunsNoProgram: a worktree is agent input, and its
// repository's config can name programs. Reconcile reads its HEAD without
// running any of them (nor git itself), and still reports what it found.
func TestWorktreeRunsNoProgram(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		e := newEnv(t, b)
		root, markers := t.TempDir(), t.TempDir()
		dir, head := hostileWorktree(t, root, markers)
		e.r.WorktreeRoots = []string{root}
		e.forge.AddRepo(1, "acme/widgets")
		e.forge.SetBranch("acme/widgets", "feature/wt", sha(1))
		sess, err := e.s.CreateSession(t.Context(), store.NewSession{Repo: "acme/widgets", Role: "author", Branch: "feature/wt", Worktree: dir})
		if err != nil {
			t.Fatal(err)
		}
		e.checkpoint(sess, head)

		rep := e.pass()
		noMarkers(t, markers)
		if rep.WorktreesChecked != 1 || len(rep.Worktrees) != 1 || rep.Worktrees[0].Head != head {
			t.Fatalf("hostile worktree: checked %d, reported %+v; want it read (head %s, not at the live head)", rep.WorktreesChecked, rep.Worktrees, head)
		}
		e.expect(sess, checkpointd.ValidityStale, "")
	})
}
