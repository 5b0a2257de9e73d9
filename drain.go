package checkpointd

import (
	"slices"
	"time"
)

// PrefixDrain marks drain ids.
const PrefixDrain = "drn_"

// DrainState is the life-cycle state of a drain.
type DrainState string

// Drain states. A running drain ends completed (nothing blocked it) or
// cancelled (the operator gave up).
const (
	DrainRunning   DrainState = "running"
	DrainCompleted DrainState = "completed"
	DrainCancelled DrainState = "cancelled"
)

// Event kinds of the drain gate, recorded in the logs of the sessions a
// decision concerns, and of write failures that block a drain.
const (
	EventDrainBlocked          = "drain.blocked"
	EventDrainCompleted        = "drain.completed"
	EventCheckpointWriteFailed = "checkpoint.write_failed"
)

// Drain is one operator-initiated drain.
type Drain struct {
	ID        string     `json:"id"`
	Reason    string     `json:"reason"`
	State     DrainState `json:"state"`
	StartedAt time.Time  `json:"started_at"`
	StartedBy string     `json:"started_by,omitempty"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
	EndedBy   string     `json:"ended_by,omitempty"`
	// Gating is true while new sessions and runs are refused: from the start
	// until the drain is cancelled, or, once completed, until it is lifted
	// (by a daemon start, a cancel, or the next drain).
	Gating   bool           `json:"gating"`
	LiftedAt *time.Time     `json:"lifted_at,omitempty"`
	Decision *DrainDecision `json:"decision,omitempty"`
}

// DrainOutcome is what a decision of the drain gate concluded.
type DrainOutcome string

// Decision outcomes.
const (
	DrainOutcomeCompleted DrainOutcome = "completed"
	DrainOutcomeBlocked   DrainOutcome = "blocked"
)

// DrainCounts summarises the active sessions against a drain.
type DrainCounts struct {
	Active   int64 `json:"active"`
	Ready    int64 `json:"ready"`
	Blocking int64 `json:"blocking"`
}

// DrainDecision is one answer of the gate to a request to complete a drain.
type DrainDecision struct {
	Outcome DrainOutcome `json:"outcome"`
	At      time.Time    `json:"at"`
	By      string       `json:"by,omitempty"`
	Counts  DrainCounts  `json:"counts"`
	// Blocking is the head of the blocking list, by session id (bounded).
	Blocking []DrainBlocker `json:"blocking"`
	// Unconfirmed lists the replicas that could not vouch that they keep
	// no failed checkpoint write the store has not recorded: any of them
	// blocks the completion, unless the operator overrode it.
	Unconfirmed []UnconfirmedReplica `json:"unconfirmed_replicas,omitempty"`
	// Overridden lists the unconfirmed replicas the operator (By) named to
	// complete past: recorded here, and forgotten by the completion.
	Overridden []UnconfirmedReplica `json:"overridden_replicas,omitempty"`
}

// BlockReason names one reason an active session blocks a drain.
type BlockReason string

// Blocking reasons. The validity ones equal the validity names.
const (
	BlockNoCheckpoint = BlockReason("no_checkpoint_since_drain")
	BlockIncomplete   = BlockReason("incomplete")
	BlockStale        = BlockReason(ValidityStale)
	BlockLeaseLost    = BlockReason(ValidityLeaseLost)
	BlockInvalidated  = BlockReason(ValidityInvalidated)
	BlockUnverified   = BlockReason(ValidityUnverified)
	BlockWriteFailed  = BlockReason("write_failed")
	BlockUnknown      = BlockReason("unknown")
)

// DrainBlocker is an active session that blocks a drain, and why.
type DrainBlocker struct {
	SessionID string        `json:"session_id"`
	Repo      string        `json:"repo"`
	Role      string        `json:"role"`
	Reasons   []BlockReason `json:"reasons"`
	// Missing lists the unmet completeness rules when incomplete.
	Missing []string `json:"missing,omitempty"`
	// ValidityReason explains a validity other than valid.
	ValidityReason string `json:"validity_reason,omitempty"`
	// CheckpointAt is when the latest checkpoint was written (nil: never).
	CheckpointAt  *time.Time `json:"checkpoint_at"`
	WriteFailedAt *time.Time `json:"write_failed_at,omitempty"`
	// WriteFailure is the problem code of the failed write.
	WriteFailure string `json:"write_failure,omitempty"`
	// Parked says an operator parked the session: it has no run, and
	// blocks only for what its latest checkpoint lacks.
	Parked bool `json:"parked,omitempty"`
	// Live is the current run's liveness (absent when parked); LastSeenAt
	// is set when the run is unresponsive, so an operator knows whether to
	// wait, park or end the session.
	Live       *bool      `json:"live,omitempty"`
	LastSeenAt *time.Time `json:"last_seen_at,omitempty"`
	// Unblock is what unblocks the session (HowToUnblock), added to the
	// answers of the API; a stored decision does not keep it.
	Unblock *Unblock `json:"unblock,omitempty"`
}

// Readiness is what the daemon knows of an active session against a drain
// that started at DrainStart.
type Readiness struct {
	DrainStart time.Time
	// Ready is the stored readiness: a complete checkpoint was written since
	// the drain started and no write by the current run failed since.
	Ready bool
	// CheckpointAt is the latest checkpoint's time (zero: none).
	CheckpointAt time.Time
	Complete     bool
	// Missing is nil when the stored list could not be read.
	Missing  []string
	Validity Validity
	// WriteFailedAt is the last failed write not followed by a success
	// (zero: none).
	WriteFailedAt time.Time
	// Unreadable is set when the gate found that the latest checkpoint
	// cannot be read back whole (damaged sealed bytes, a document that does
	// not parse, a missing row): the gate vouches for nothing it cannot
	// read.
	Unreadable bool
	// Parked is true when the session has no current run (an operator
	// parked it). Ready is then whether its latest checkpoint is complete.
	Parked bool
}

// DrainBlockers returns why a session blocks the drain, or nil when it does
// not. It fails closed: a session whose state does not make sense blocks
// with BlockUnknown, never passes.
//
// A parked session has no run that could hold state it did not write, nor
// write again: it never blocks for no checkpoint since the drain or for a
// failed write of the run it superseded, only for what its latest
// checkpoint lacks (incomplete, not valid, unreadable).
func DrainBlockers(r Readiness) []BlockReason {
	var out []BlockReason
	failed := !r.Parked && !r.WriteFailedAt.IsZero() && !r.WriteFailedAt.Before(r.DrainStart)
	hasCheckpoint := !r.CheckpointAt.IsZero()
	// The stored readiness, not the clock, says whether a checkpoint was
	// written since the drain reset it: not ready although complete and not
	// failed means nothing was written since.
	if !r.Parked && (!hasCheckpoint || (!r.Ready && (r.CheckpointAt.Before(r.DrainStart) || (r.Complete && !failed && !r.Unreadable)))) {
		out = append(out, BlockNoCheckpoint)
	}
	if hasCheckpoint && !r.Complete {
		out = append(out, BlockIncomplete)
	}
	switch {
	case r.Validity == ValidityValid:
	case r.Validity.Valid():
		out = append(out, BlockReason(r.Validity))
	default:
		out = append(out, BlockUnknown)
	}
	if failed {
		out = append(out, BlockWriteFailed)
	}
	if (r.Unreadable || (hasCheckpoint && !r.Complete && r.Missing == nil)) && !slices.Contains(out, BlockUnknown) {
		out = append(out, BlockUnknown)
	}
	if out == nil && !r.Ready {
		out = append(out, BlockUnknown)
	}
	return out
}
