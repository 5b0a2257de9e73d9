package checkpointd

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// SessionState is the life-cycle state of a session.
type SessionState string

// Session states.
const (
	SessionActive SessionState = "active"
	SessionEnded  SessionState = "ended"
)

// Outcome is how an ended session ended.
type Outcome string

// Session outcomes.
const (
	OutcomeCompleted Outcome = "completed"
	OutcomeAbandoned Outcome = "abandoned"
)

// Valid reports whether o is a known outcome.
func (o Outcome) Valid() bool { return o == OutcomeCompleted || o == OutcomeAbandoned }

// Validity is the derived state of a session's latest checkpoint against the
// evidence the daemon holds.
type Validity string

// Validity values. Unverified is the state until evidence arrives.
const (
	ValidityValid       Validity = "valid"
	ValidityStale       Validity = "stale"
	ValidityLeaseLost   Validity = "lease_lost"
	ValidityInvalidated Validity = "invalidated"
	ValidityUnverified  Validity = "unverified"
)

// Valid reports whether v is a known validity.
func (v Validity) Valid() bool {
	switch v {
	case ValidityValid, ValidityStale, ValidityLeaseLost, ValidityInvalidated, ValidityUnverified:
		return true
	}
	return false
}

// Agent identifies the agent runtime behind a run. It is transport-neutral:
// the same connection may carry several runs.
type Agent struct {
	Runtime        string `json:"runtime,omitempty"`
	RuntimeVersion string `json:"runtime_version,omitempty"`
	Provider       string `json:"provider,omitempty"`
	Model          string `json:"model,omitempty"`
	Instance       string `json:"instance,omitempty"`
}

// Session is a logical unit of agent work on one target, with a role.
type Session struct {
	ID           string       `json:"id"`
	Repo         string       `json:"repo"`
	Role         string       `json:"role"`
	Issue        int64        `json:"issue,omitempty"`
	PR           int64        `json:"pr,omitempty"`
	Branch       string       `json:"branch,omitempty"`
	Worktree     string       `json:"worktree,omitempty"`
	Capabilities []string     `json:"capabilities"`
	State        SessionState `json:"state"`
	Outcome      Outcome      `json:"outcome,omitempty"`
	CreatedAt    time.Time    `json:"created_at"`
	UpdatedAt    time.Time    `json:"updated_at"`
	EndedAt      *time.Time   `json:"ended_at,omitempty"`
	// EndReason is why the session ended, as said when it was ended;
	// EndedBy names the operator who ended it on its agent's behalf (""
	// when its own run did).
	EndReason  string `json:"end_reason,omitempty"`
	EndedBy    string `json:"ended_by,omitempty"`
	CurrentRun *Run   `json:"current_run,omitempty"`
	// Parked is true while an operator's park left the active session with
	// no current run: it waits for the next run.
	Parked         bool               `json:"parked,omitempty"`
	Validity       Validity           `json:"validity"`
	ValidityReason string             `json:"validity_reason,omitempty"`
	ValidityAt     time.Time          `json:"validity_at"`
	Latest         *CheckpointSummary `json:"latest_checkpoint,omitempty"`
	// Leases are the leases the session holds now: held and not past
	// expires_at, judged when read. Always an array.
	Leases []HeldLease `json:"leases"`
	// ActivityAt is the recorded sighting of the session's runs that
	// sort=activity orders by (it lags the truth by at most
	// SeenRefresh): the list cursor carries it. Not part of the answer.
	ActivityAt time.Time `json:"-"`
}

// HeldLease is a lease as a session summary lists it.
type HeldLease struct {
	ID           string    `json:"id"`
	Resource     Resource  `json:"resource"`
	FencingToken int64     `json:"fencing_token"`
	ExpiresAt    time.Time `json:"expires_at"`
}

// Run is one agent execution attached to a session. Its fencing token
// increases with every run of the session; only the current run may write.
type Run struct {
	ID             string     `json:"id"`
	SessionID      string     `json:"session_id"`
	FencingToken   int64      `json:"fencing_token"`
	Agent          Agent      `json:"agent"`
	StartedAt      time.Time  `json:"started_at"`
	TakeoverReason string     `json:"takeover_reason,omitempty"`
	SupersededAt   *time.Time `json:"superseded_at,omitempty"`
	SupersededBy   string     `json:"superseded_by,omitempty"`
	// LastSeenAt is when the run was last heard from (any call it made);
	// Live says whether that is within --run-liveness, judged when read.
	LastSeenAt *time.Time `json:"last_seen_at,omitempty"`
	Live       *bool      `json:"live,omitempty"`
}

// Checkpoint is an immutable, stored checkpoint: the (redacted) document
// plus what the server adds.
type Checkpoint struct {
	Document
	SessionID  string    `json:"session_id"`
	Seq        int64     `json:"seq"`
	ParentSeq  *int64    `json:"parent_seq"`
	CreatedAt  time.Time `json:"created_at"`
	Digest     string    `json:"digest"`
	Redactions int       `json:"redactions"`
	Complete   bool      `json:"complete"`
	Missing    []string  `json:"missing"`
	// Validity is the session's validity when this is its latest checkpoint,
	// and "superseded" for older ones: validity judges only the latest.
	Validity Validity `json:"validity"`
	// ValidityReason says why the latest checkpoint is not valid; it is read
	// with Validity, so the two always agree (the resume verdict shows it).
	ValidityReason string `json:"-"`
}

// ValiditySuperseded marks a checkpoint that is no longer its session's
// latest; only the latest checkpoint is judged.
const ValiditySuperseded Validity = "superseded"

// CheckpointSummary is the list form of a checkpoint.
type CheckpointSummary struct {
	Seq       int64     `json:"seq"`
	RunID     string    `json:"run_id"`
	Stage     string    `json:"stage,omitempty"`
	Branch    string    `json:"branch,omitempty"`
	Head      string    `json:"head,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	Complete  bool      `json:"complete"`
	Missing   []string  `json:"missing"`
	Digest    string    `json:"digest"`
	// WaitingOn (blocker.waiting_on) and NextActor (next_action.actor) are
	// shown for a session's latest checkpoint only: the session row keeps
	// them in the clear; the history's are sealed with the document.
	WaitingOn string `json:"waiting_on,omitempty"`
	NextActor string `json:"next_actor,omitempty"`
}

// Event kinds recorded in a session's append-only log.
const (
	EventSessionCreated    = "session.created"
	EventRunStarted        = "run.started"
	EventRunSuperseded     = "run.superseded"
	EventCheckpointWritten = "checkpoint.written"
	EventSessionEnded      = "session.ended"
)

// Event is one append-only audit record of a session.
type Event struct {
	SessionID string          `json:"session_id"`
	Seq       int64           `json:"seq"`
	Kind      string          `json:"kind"`
	At        time.Time       `json:"at"`
	RunID     string          `json:"run_id,omitempty"`
	Data      json.RawMessage `json:"data,omitempty"`
	// CheckpointSeq is the checkpoint a validity change or a drain decision
	// refers to: retention keeps it while the event is kept.
	CheckpointSeq *int64 `json:"checkpoint_seq,omitempty"`
}

// TargetText is the session's target in words ("issue #12, branch
// fix-12"), for messages and names a person or a model reads.
func (s *Session) TargetText() string {
	var parts []string
	if s.Issue > 0 {
		parts = append(parts, fmt.Sprintf("issue #%d", s.Issue))
	}
	if s.PR > 0 {
		parts = append(parts, fmt.Sprintf("PR #%d", s.PR))
	}
	if s.Branch != "" {
		parts = append(parts, "branch "+s.Branch)
	}
	if parts == nil {
		return "no target"
	}
	return strings.Join(parts, ", ")
}
