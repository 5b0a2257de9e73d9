package reconcile

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/checkpointd/checkpointd/store"
)

// Worktree is what a session's recorded worktree holds on this host,
// compared with its latest checkpoint and the live head. Drift is reported,
// never "fixed": the agent or the operator decides what to do with it.
type Worktree struct {
	SessionID string `json:"session_id"`
	Repo      string `json:"repo"`
	Path      string `json:"path"`
	Head      string `json:"head,omitempty"`   // local HEAD
	Branch    string `json:"branch,omitempty"` // local branch; empty when detached
	Dirty     bool   `json:"dirty"`
	// Findings name each difference: head_differs (local HEAD is not the
	// checkpoint's head), not_at_live_head (nor the forge's), branch_differs,
	// detached, dirty (uncommitted changes).
	Findings []string `json:"findings"`
	Error    string   `json:"error,omitempty"`
}

// Worktree finding names.
const (
	FindingHeadDiffers   = "head_differs"
	FindingNotAtLiveHead = "not_at_live_head"
	FindingBranchDiffers = "branch_differs"
	FindingDetached      = "detached"
	FindingDirty         = "dirty"
)

// inspectWorktree looks at a session's worktree when its path is an
// absolute directory on this host inside a git work tree; ok is false
// otherwise (the worktree lives on another machine). liveHead is the
// forge's head of the session's branch in this pass, "" when unknown.
func inspectWorktree(ctx context.Context, w store.ActiveWorktree, liveHead string, timeout time.Duration) (out Worktree, ok bool) {
	path := filepath.Clean(w.Path)
	if fi, err := os.Stat(path); !filepath.IsAbs(w.Path) || err != nil || !fi.IsDir() {
		return out, false
	}
	out = Worktree{SessionID: w.SessionID, Repo: w.Repo, Path: path, Findings: []string{}}
	inside, err := git(ctx, timeout, path, "rev-parse", "--is-inside-work-tree")
	if err == nil && inside != "true" {
		return out, false // a bare repository or a .git directory
	}
	if err != nil {
		// A directory with .git that git will not read (another owner's
		// repository, a broken one) is worth reporting; any other
		// directory is simply not a worktree.
		if _, serr := os.Lstat(filepath.Join(path, ".git")); serr != nil {
			return out, false
		}
		out.Error = err.Error()
		return out, true
	}
	head, err := git(ctx, timeout, path, "rev-parse", "--verify", "HEAD")
	if err != nil {
		out.Error = err.Error()
		return out, true
	}
	out.Head = head
	// symbolic-ref -q exits 1 without output on a detached HEAD.
	out.Branch, _ = git(ctx, timeout, path, "symbolic-ref", "--short", "-q", "HEAD")
	status, err := git(ctx, timeout, path, "status", "--porcelain")
	if err != nil {
		out.Error = err.Error()
	}
	out.Dirty = status != ""
	if w.Head != "" && !strings.EqualFold(head, w.Head) {
		out.Findings = append(out.Findings, FindingHeadDiffers)
	}
	if liveHead != "" && !strings.EqualFold(head, liveHead) {
		out.Findings = append(out.Findings, FindingNotAtLiveHead)
	}
	switch {
	case out.Branch == "" && w.Branch != "":
		out.Findings = append(out.Findings, FindingDetached)
	case w.Branch != "" && out.Branch != w.Branch:
		out.Findings = append(out.Findings, FindingBranchDiffers)
	}
	if out.Dirty {
		out.Findings = append(out.Findings, FindingDirty)
	}
	return out, true
}

// git runs one read-only git command in dir and returns its trimmed
// output. The worktree belongs to an agent, so git must neither take locks
// the agent may need (--no-optional-locks) nor run programs the
// repository's config names (fsmonitor, hooks); git itself refuses
// repositories owned by another user (safe.directory).
func git(ctx context.Context, timeout time.Duration, dir string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	argv := append([]string{"-C", dir, "--no-optional-locks", "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null"}, args...)
	cmd := exec.CommandContext(ctx, "git", argv...)
	cmd.Env = gitEnv()
	cmd.WaitDelay = time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if ctx.Err() != nil {
		return "", errors.New("git " + args[0] + " did not finish within " + timeout.String())
	}
	if err != nil {
		msg, _, _ := strings.Cut(strings.TrimSpace(stderr.String()), "\n")
		if msg == "" {
			msg = err.Error()
		}
		return "", errors.New("git " + args[0] + ": " + msg)
	}
	return strings.TrimSpace(string(out)), nil
}

// gitEnv is the daemon's environment without GIT_* variables, which would
// point git at another repository, index or work tree.
func gitEnv() []string {
	env := []string{"GIT_TERMINAL_PROMPT=0", "GIT_OPTIONAL_LOCKS=0", "LC_ALL=C"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GIT_") && !strings.HasPrefix(kv, "LC_ALL=") {
			env = append(env, kv)
		}
	}
	return env
}
