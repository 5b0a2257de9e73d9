package reconcile

import (
	"errors"
	"path/filepath"
	"strings"

	"github.com/checkpointd/checkpointd/reconcile/gitdir"
	"github.com/checkpointd/checkpointd/redact"
	"github.com/checkpointd/checkpointd/store"
)

// Worktree is what a session's recorded worktree holds on this host,
// compared with its latest checkpoint and the live head. Drift is reported,
// never "fixed": the agent or the operator decides what to do with it.
//
// The worktree is read from the repository's files (HEAD and the refs),
// never by running git: a worktree is agent input, and its config can name
// programs git would run. So uncommitted changes are not looked for —
// that means comparing the index with every file of the work tree, which
// git does through the repository's filters.
type Worktree struct {
	SessionID string `json:"session_id"`
	Repo      string `json:"repo"`
	Path      string `json:"path"`
	Head      string `json:"head,omitempty"`   // local HEAD
	Branch    string `json:"branch,omitempty"` // local branch; empty when detached
	// Dirty is never set any more (uncommitted changes are not looked
	// for, see above); it stays so that reports stored by earlier
	// versions read back as they were.
	Dirty bool `json:"dirty,omitempty"`
	// Findings name each difference: head_differs (local HEAD is not the
	// checkpoint's head), not_at_live_head (nor the forge's),
	// branch_differs, detached.
	Findings []string `json:"findings"`
	Error    string   `json:"error,omitempty"`
}

// Worktree finding names.
const (
	FindingHeadDiffers   = "head_differs"
	FindingNotAtLiveHead = "not_at_live_head"
	FindingBranchDiffers = "branch_differs"
	FindingDetached      = "detached"
	// FindingDirty is only in reports stored by earlier versions, which
	// ran git status.
	FindingDirty = "dirty"
)

// inspectWorktree reads a session's worktree when its path is a git work
// tree under one of roots; ok is false otherwise (outside the roots
// nothing is looked at; inside, a missing directory is a worktree on
// another machine). liveHead is the forge's head of the session's branch
// in this pass, "" when unknown.
func inspectWorktree(roots *gitdir.Roots, w store.ActiveWorktree, liveHead string) (out Worktree, ok bool) {
	head, err := roots.ReadHead(w.Path)
	if errors.Is(err, gitdir.ErrOutsideRoots) || errors.Is(err, gitdir.ErrNotWorktree) {
		return out, false
	}
	out = Worktree{SessionID: w.SessionID, Repo: w.Repo, Path: filepath.Clean(w.Path), Findings: []string{}}
	// The branch and the error come from files an agent wrote (a ref
	// name, or one quoted in an error) and go into a stored report.
	out.Branch = redacted(head.Branch())
	if err != nil {
		out.Error = redacted(err.Error())
		return out, true
	}
	out.Head = head.Commit
	if w.Head != "" && !strings.EqualFold(out.Head, w.Head) {
		out.Findings = append(out.Findings, FindingHeadDiffers)
	}
	if liveHead != "" && !strings.EqualFold(out.Head, liveHead) {
		out.Findings = append(out.Findings, FindingNotAtLiveHead)
	}
	switch {
	case out.Branch == "" && w.Branch != "":
		out.Findings = append(out.Findings, FindingDetached)
	case w.Branch != "" && out.Branch != w.Branch:
		out.Findings = append(out.Findings, FindingBranchDiffers)
	}
	return out, true
}

// redacted is s with any secret in it replaced; a string the redactor
// cannot read is dropped whole.
func redacted(s string) string {
	out, _, err := redact.String(s)
	if err != nil {
		return "[unreadable]"
	}
	return out
}
