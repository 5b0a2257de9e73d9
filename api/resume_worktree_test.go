package api_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/api"
	"github.com/checkpointd/checkpointd/reconcile"
	"github.com/checkpointd/checkpointd/reconcile/forgetest"
	"github.com/checkpointd/checkpointd/store/storetest"
)

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@example.com",
		"GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestResumeReportsWorktreeDrift: a worktree under a worktree root that
// holds a commit the checkpoint does not is in the resume answer,
// reported, not fixed — and neither reconcile nor resume ran the program
// its repository names as a filter for the touched file.
func TestResumeReportsWorktreeDrift(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	root, markers := t.TempDir(), t.TempDir()
	dir := filepath.Join(root, "w1")
	git(t, root, "init", "-q", "-b", "fix-12", dir)
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, dir, "add", "a.txt")
	git(t, dir, "commit", "-q", "-m", "a")
	head := git(t, dir, "rev-parse", "HEAD")
	git(t, dir, "commit", "-q", "--allow-empty", "-m", "local, not pushed")
	local := git(t, dir, "rev-parse", "HEAD")
	marker := filepath.Join(markers, "ran")
	git(t, dir, "config", "filter.evil.clean", `sh -c "touch '`+marker+`'; cat"`)
	if err := os.WriteFile(filepath.Join(dir, ".gitattributes"), []byte("* filter=evil\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(dir, "a.txt"), later, later); err != nil {
		t.Fatal(err)
	}

	h := newHarness(t, storetest.SQLite)
	forge := forgetest.New(t)
	forge.AddRepo(1, "acme/widgets")
	forge.SetBranch("acme/widgets", "fix-12", head)
	h.handler = api.New(api.Deps{Store: api.StoresOf(h.store), Workflow: checkpointd.DefaultWorkflow(), DigestKey: testDigestKey,
		Reconciler: &reconcile.Reconciler{Store: h.store, Forge: reconcile.Gitea(forge.URL, "", 0), ForgeURL: forge.URL,
			Concurrency: 2, CallTimeout: 5 * time.Second, Attempts: 1, WorktreeRoots: []string{root}}})
	id, run, tok := h.newSession()
	h.do("POST", "/v1/sessions/"+id+"/checkpoints", h.agent, checkpointDoc(run, tok, func(d map[string]any) {
		d["workspace"] = map[string]any{"worktree": dir, "branch": "fix-12", "head": head}
	})).expect(t, 201, "")
	h.do("POST", "/v1/reconcile", h.operator, nil).expect(t, 200, "")

	res := h.do("GET", "/v1/sessions/"+id+"/resume", h.agent, nil).expect(t, 200, "")
	if res.str("validity") != "valid" || res.get("resumable") != true {
		t.Fatalf("resume after reconcile: %s", res.raw)
	}
	findings, _ := res.get("worktree", "findings").([]any)
	if res.str("worktree", "path") != dir || res.str("worktree", "head") != local || !slices.Contains(findings, any("head_differs")) {
		t.Fatalf("worktree in the resume answer: %s", res.raw)
	}
	if res.get("worktree", "dirty") != nil {
		t.Errorf("the answer carries dirty, which is no longer looked for: %s", res.raw)
	}
	if got := git(t, dir, "rev-parse", "HEAD"); got != local {
		t.Fatal("reconcile touched the worktree")
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("reconcile or resume ran the filter the worktree's repository names")
	}
}
