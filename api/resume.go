package api

import (
	"context"
	"fmt"
	"time"

	"github.com/checkpointd/checkpointd"
)

// Resume reasons that are not a validity (those are the validity names).
const (
	reasonSessionEnded   = "session_ended"
	reasonNoCheckpoint   = "no_checkpoint"
	reasonIncomplete     = "incomplete"
	reasonPendingUnknown = "pending_mutation_outcome_unknown"
	reasonPendingDone    = "pending_mutation_done"
	reasonPendingNotDone = "pending_mutation_not_done"
)

// MutationResolver asks the forge whether a checkpoint's pending mutation
// happened (reconcile.Resolver).
type MutationResolver interface {
	Resolve(ctx context.Context, sess *checkpointd.Session, cp *checkpointd.Checkpoint) *checkpointd.MutationAnswer
}

// resolveMutation is the forge's answer about cp's pending mutation;
// without a resolver, unknown.
func (a *api) resolveMutation(ctx context.Context, sess *checkpointd.Session, cp *checkpointd.Checkpoint) checkpointd.MutationAnswer {
	if a.Mutations != nil {
		if ans := a.Mutations.Resolve(ctx, sess, cp); ans != nil {
			return *ans
		}
	}
	return checkpointd.MutationAnswer{Outcome: checkpointd.MutationUnknown, CheckedAt: time.Now().UTC(),
		Reason: "no forge is configured to ask (--gitea-url)"}
}

func pendingReason(o checkpointd.MutationOutcome) string {
	switch o {
	case checkpointd.MutationDone:
		return reasonPendingDone
	case checkpointd.MutationNotDone:
		return reasonPendingNotDone
	}
	return reasonPendingUnknown
}

// explanation is one resume reason: its stable word and what it means for
// this session.
type explanation struct {
	Reason      string `json:"reason"`
	Explanation string `json:"explanation"`
}

// add records a reason. In reasons a validity keeps its documented form
// "<validity>: <explanation>", the other words stand alone; explanations
// carries every one with its explanation.
func (r *resumeResponse) add(word, why string, withWhy bool) {
	entry := word
	if withWhy {
		entry += ": " + why
	}
	r.Reasons = append(r.Reasons, entry)
	r.Explanations = append(r.Explanations, explanation{Reason: word, Explanation: why})
}

func endedExplanation(s *checkpointd.Session) string {
	if s.Outcome != "" {
		return fmt.Sprintf("the session ended (%s): start a new session to go on", s.Outcome)
	}
	return "the session ended: start a new session to go on"
}

func pendingExplanation(p *checkpointd.PendingMutation, ans checkpointd.MutationAnswer) string {
	what := p.Kind
	if p.Target != "" {
		what += " on " + p.Target
	}
	switch ans.Outcome {
	case checkpointd.MutationDone:
		return "the last run was doing " + what + " and the forge shows it happened (" + ans.Reason + "): do not do it again"
	case checkpointd.MutationNotDone:
		return "the last run was doing " + what + " and the forge shows it did not happen (" + ans.Reason +
			"): do it, with the same idempotency key and its marker"
	}
	if p.IdempotencyKey == "" {
		return "the last run was doing " + what + " and whether it happened is unknown (" + ans.Reason + "): check before doing it again"
	}
	return "the last run was doing " + what + " and whether it happened is unknown (" + ans.Reason + "): look for idempotency key " +
		p.IdempotencyKey + " before doing it again"
}
