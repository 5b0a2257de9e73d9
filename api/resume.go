package api

import (
	"fmt"

	"github.com/checkpointd/checkpointd"
)

// Resume reasons that are not a validity (those are the validity names).
const (
	reasonSessionEnded   = "session_ended"
	reasonNoCheckpoint   = "no_checkpoint"
	reasonIncomplete     = "incomplete"
	reasonPendingUnknown = "pending_mutation_outcome_unknown"
)

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

func pendingExplanation(p *checkpointd.PendingMutation) string {
	what := p.Kind
	if p.Target != "" {
		what += " on " + p.Target
	}
	if p.IdempotencyKey == "" {
		return "the last run was doing " + what + " and whether it happened is unknown: check before doing it again"
	}
	return "the last run was doing " + what + " and whether it happened is unknown: look for idempotency key " +
		p.IdempotencyKey + " before doing it again"
}
