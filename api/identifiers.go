package api

import (
	"strings"

	"github.com/checkpointd/checkpointd"
)

// Identifying values are the ones the daemon matches as sent: a session's
// repo, branch and worktree (against the forge's events, the token's
// scope and the host), a lease's resource repo and branch, the same three
// in a checkpoint document (a checkpoint moves the session's binding to
// them), and an Idempotency-Key (the lookup key of a stored response).
// Redacting one would store a name that matches nothing, so one that looks
// like a secret is refused instead (422; 400 for the key), and nothing of
// it is stored or echoed. Every other string an agent sends is redacted
// before it is stored, logged or answered. docs/redaction.md, "What else
// is scanned", keeps the list.

// secretIdentifier is the problem of an identifying value that looks like
// a secret. It names the field, never the value.
func secretIdentifier(path string) checkpointd.Problem {
	return checkpointd.Problem{Path: path, Message: "looks like a secret (redaction would rewrite it), and a name " +
		"that must match as sent cannot be stored rewritten; use a name that holds no credential"}
}

// identifying returns the problems of the identifying values (JSON
// pointer → value) that look like secrets.
func identifying(fields ...[2]string) []checkpointd.Problem {
	var ps []checkpointd.Problem
	for _, f := range fields {
		if f[1] != "" && checkpointd.LooksLikeSecret(f[1]) {
			ps = append(ps, secretIdentifier(f[0]))
		}
	}
	return ps
}

// redactedIdentifiers refuses a checkpoint document whose identifying
// values redaction rewrote (PrepareCheckpoint redacts every string): the
// write would bind the session to a branch, worktree or repo that matches
// nothing. Errors: ErrInvalidCheckpoint.
func redactedIdentifiers(doc *checkpointd.Document) error {
	var ps []checkpointd.Problem
	marked := func(path, v string) {
		if strings.Contains(v, checkpointd.RedactionMarker) {
			ps = append(ps, secretIdentifier(path))
		}
	}
	if doc.Target != nil {
		marked("/target/repo", doc.Target.Repo)
	}
	if doc.Workspace != nil {
		marked("/workspace/branch", doc.Workspace.Branch)
		marked("/workspace/worktree", doc.Workspace.Worktree)
	}
	if ps != nil {
		return &checkpointd.ValidationError{Kind: checkpointd.ErrInvalidCheckpoint, Problems: ps}
	}
	return nil
}
