// The judgement of a checkpoint write: what it records besides the
// document, decided once for every way the store writes one.

package checkpointd

import (
	"fmt"
	"strings"
)

// WriteEvidence is what a checkpoint write is judged on, read under the
// session's row lock by the write itself.
type WriteEvidence struct {
	Doc *Document
	// Repo and Role are the session's: it is bound to one target and one
	// role for life.
	Repo, Role string
	// Held maps the ids of the leases the writing run holds now to their
	// fencing tokens.
	Held map[string]int64
	// Current is the session's verdict before the write.
	Current Verdict
	// Live is the live state of the ref the session is bound to after the
	// write (nil: nothing observed).
	Live *LiveRef
}

// WriteJudgement is what a checkpoint write records besides the document.
type WriteJudgement struct {
	// Missing lists the unmet completeness rules (Missing), never nil.
	Missing  []string
	Complete bool
	// LeasesHeld says the writing run holds every lease the document
	// names, at the fencing token it names.
	LeasesHeld bool
	// Verdict is the session's validity after the write; Changed says it
	// differs from the evidence's Current.
	Verdict
	Changed bool
	// DrainReady is the session's readiness for a drain running now
	// (DrainBlockers reads it back as Readiness.Ready): a complete
	// checkpoint by the current run.
	DrainReady bool
}

// JudgeWrite judges a checkpoint write: whether its session takes it (a
// checkpoint about another repo or role than the session's is
// ErrInvalidCheckpoint), its completeness, its leases and the session's
// validity after it. Every way the store writes a checkpoint applies this
// judgement; none judges for itself.
func JudgeWrite(e WriteEvidence) (WriteJudgement, error) {
	if err := bound(e.Doc, e.Repo, e.Role); err != nil {
		return WriteJudgement{}, err
	}
	j := WriteJudgement{Missing: Missing(e.Doc, e.Held), LeasesHeld: HoldsLeases(e.Doc, e.Held)}
	j.Complete = Complete(j.Missing)
	if j.Missing == nil {
		j.Missing = []string{}
	}
	head := ""
	if e.Doc != nil && e.Doc.Workspace != nil {
		head = strings.ToLower(e.Doc.Workspace.Head)
	}
	j.Verdict, j.Changed = Rejudge(e.Current, ValidityEvidence{LeasesHeld: j.LeasesHeld, Head: head, Live: e.Live})
	j.DrainReady = j.Complete
	return j, nil
}

// bound rejects a checkpoint about another repo or role than its session's.
func bound(doc *Document, repo, role string) error {
	var problems []Problem
	if doc.Target != nil && !strings.EqualFold(doc.Target.Repo, repo) {
		problems = append(problems, Problem{Path: "/target/repo",
			Message: fmt.Sprintf("repo %q is not the session's repo %q", doc.Target.Repo, repo)})
	}
	if doc.Role != role {
		problems = append(problems, Problem{Path: "/role",
			Message: fmt.Sprintf("role %q is not the session's role %q", doc.Role, role)})
	}
	if problems != nil {
		return &ValidationError{Kind: ErrInvalidCheckpoint, Problems: problems}
	}
	return nil
}
