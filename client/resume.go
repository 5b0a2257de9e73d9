package client

import (
	"context"
	"net/url"

	"github.com/checkpointd/checkpointd"
)

// PendingMutation is a resume's pending mutation with the forge's answer
// about it: Outcome done (do not do it again), not_done (do
// it, with the same idempotency key and its marker), or unknown (check it
// yourself by its idempotency key before acting again); Reason says why.
type PendingMutation struct {
	checkpointd.PendingMutation
	checkpointd.MutationAnswer
}

// Explanation is one resume reason: the stable word to match on, and what
// it means here, to act on.
type Explanation struct {
	Reason      string `json:"reason"`
	Explanation string `json:"explanation"`
}

// Resume is the verdict on the latest checkpoint (GET …/resume). Only a
// Resumable checkpoint may be continued from as is; otherwise Reasons say
// what to check first (stale: the branch moved; lease_lost; …).
type Resume struct {
	Resumable       bool                    `json:"resumable"`
	Validity        checkpointd.Validity    `json:"validity"`
	Reasons         []string                `json:"reasons"`
	Explanations    []Explanation           `json:"explanations"`
	Checkpoint      *checkpointd.Checkpoint `json:"checkpoint"`
	Live            *checkpointd.LiveRef    `json:"live"`
	PendingMutation *PendingMutation        `json:"pending_mutation,omitempty"`
	Worktree        *Worktree               `json:"worktree,omitempty"`
	// Run is the current run with its liveness (nil while parked).
	Run    *checkpointd.Run `json:"run"`
	Parked bool             `json:"parked,omitempty"`
}

// Resume reads the resume verdict. runID, when it is the current run's,
// counts as a sighting of the run (it stays live); empty reads only.
func (s *Sessions) Resume(ctx context.Context, id, runID string) (*Resume, error) {
	q := url.Values{}
	if runID != "" {
		q.Set("run_id", runID)
	}
	var out Resume
	if err := s.c.get(ctx, sessionPath(id, "resume"), q, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Worktree is what the last reconcile pass found in the session's recorded
// worktree on the daemon's host (reconcile.Worktree, copied so the client
// does not link the reconcile package; a test keeps the two alike). A
// dirty or diverged worktree is reported, never "fixed".
type Worktree struct {
	SessionID string `json:"session_id"`
	Repo      string `json:"repo"`
	Path      string `json:"path"`
	Head      string `json:"head,omitempty"`
	Branch    string `json:"branch,omitempty"`
	Dirty     bool   `json:"dirty,omitempty"`
	// Findings name each difference: head_differs, not_at_live_head,
	// branch_differs, detached.
	Findings []string `json:"findings"`
	Error    string   `json:"error,omitempty"`
}
