package client

import (
	"encoding/json"
	"time"

	"github.com/checkpointd/checkpointd"
)

// The change feed's events, decoded (docs/watch.md, "Events"): a
// WatchEvent's Event is one of these pointers, by its Type.

// SessionChange is what every session event carries.
type SessionChange struct {
	SessionID string    `json:"session_id"`
	Repo      string    `json:"repo"`
	At        time.Time `json:"at"`
	// EventSeq is the event's seq in GET /v1/sessions/{id}/events.
	EventSeq int64 `json:"event_seq"`
	// RunID is the run concerned, when one is.
	RunID string `json:"run_id,omitempty"`
}

// ValidityEvent: the session's validity changed (a checkpoint went stale,
// lost a lease, was invalidated or verified).
type ValidityEvent struct {
	SessionChange
	From   checkpointd.Validity `json:"from"`
	To     checkpointd.Validity `json:"to"`
	Reason string               `json:"reason"`
	// Evidence is what the verdict was judged on (checkpoint_seq, the
	// observed head, the delivery, the lease, …).
	Evidence map[string]any `json:"evidence"`
}

// LeaseEvent: a lease was acquired, released, expired or moved (by a
// takeover, FromRun naming the run it left).
type LeaseEvent struct {
	SessionChange
	Change       string               `json:"change"`
	LeaseID      string               `json:"lease_id"`
	Resource     checkpointd.Resource `json:"resource"`
	FencingToken int64                `json:"fencing_token"`
	Cause        string               `json:"cause,omitempty"`
	FromRun      string               `json:"from_run,omitempty"`
}

// RunEvent: a run started, was superseded, parked, unparked or went
// unresponsive.
type RunEvent struct {
	SessionChange
	Change string `json:"change"`
	// started:
	FencingToken int64              `json:"fencing_token,omitempty"`
	Takeover     bool               `json:"takeover,omitempty"`
	Agent        *checkpointd.Agent `json:"agent,omitempty"`
	// started (a takeover's), superseded and parked:
	Reason string `json:"reason,omitempty"`
	// superseded:
	SupersededBy string `json:"superseded_by,omitempty"`
	// parked:
	By string `json:"by,omitempty"`
	// unresponsive:
	LastSeenAt    *time.Time `json:"last_seen_at,omitempty"`
	WindowSeconds int64      `json:"window_seconds,omitempty"`
}

// CheckpointEvent: a checkpoint was written.
type CheckpointEvent struct {
	SessionChange
	Seq      int64    `json:"seq"`
	Complete bool     `json:"complete"`
	Missing  []string `json:"missing"`
	Stage    string   `json:"stage,omitempty"`
	Digest   string   `json:"digest,omitempty"`
}

// SessionEvent: a session was created or ended; after a reset, "current"
// carries each session's state as it is now.
type SessionEvent struct {
	SessionChange
	Change  string               `json:"change"`
	Outcome checkpointd.Outcome  `json:"outcome,omitempty"`
	Reason  string               `json:"reason,omitempty"`
	By      string               `json:"by,omitempty"`
	Session *checkpointd.Session `json:"session,omitempty"`
}

// DrainEvent: a drain started, completed or was cancelled.
type DrainEvent struct {
	DrainID string    `json:"drain_id"`
	Change  string    `json:"change"`
	At      time.Time `json:"at"`
}

// ResetEvent: the feed could not resume from the Last-Event-ID; re-read
// what you hold (the current state follows, as session "current" events).
type ResetEvent struct {
	Reason string `json:"reason"`
	Detail string `json:"detail,omitempty"`
}

// ErrorEvent: the stream ends after it, with why (slow_client,
// memory_budget, unauthorized or a problem code); Watch reconnects.
type ErrorEvent struct {
	Reason string `json:"reason"`
	Detail string `json:"detail,omitempty"`
}

// decodeEvent is the typed event of an SSE event, nil for a type this
// client does not know or data that does not decode (Data still has it).
func decodeEvent(typ string, data json.RawMessage) any {
	var v any
	switch typ {
	case checkpointd.FeedValidity:
		v = new(ValidityEvent)
	case checkpointd.FeedLease:
		v = new(LeaseEvent)
	case checkpointd.FeedRun:
		v = new(RunEvent)
	case checkpointd.FeedCheckpoint:
		v = new(CheckpointEvent)
	case checkpointd.FeedSession:
		v = new(SessionEvent)
	case checkpointd.FeedDrain:
		v = new(DrainEvent)
	case checkpointd.FeedReset:
		v = new(ResetEvent)
	case "error":
		v = new(ErrorEvent)
	default:
		return nil
	}
	if json.Unmarshal(data, v) != nil {
		return nil
	}
	return v
}
