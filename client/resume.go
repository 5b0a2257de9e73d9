package client

import (
	"context"
	"net/url"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/reconcile"
)

// PendingMutation is a resume's pending mutation: Outcome is always
// "outcome_unknown": check the mutation by its idempotency key before
// acting again.
type PendingMutation struct {
	checkpointd.PendingMutation
	Outcome string `json:"outcome"`
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
	PendingMutation *PendingMutation        `json:"pending_mutation"`
	Worktree        *reconcile.Worktree     `json:"worktree"`
	// Run is the current run with its liveness (nil while parked).
	Run    *checkpointd.Run `json:"run"`
	Parked bool             `json:"parked"`
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
