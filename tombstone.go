package checkpointd

import (
	"fmt"
	"time"
)

// TombstoneKind says how a session left the store.
type TombstoneKind string

// Tombstone kinds: an operator force-cleared the session, or retention
// pruned it after it ended.
const (
	TombstoneCleared TombstoneKind = "cleared"
	TombstonePruned  TombstoneKind = "pruned"
)

// TombstoneRetention names the actor of a pruned session's tombstone.
const TombstoneRetention = "retention"

// Tombstone is what is left of a session that was force-cleared or pruned:
// the audit record of the removal, and the reason a late request naming the
// session is answered 410 gone instead of resurrecting it.
type Tombstone struct {
	SessionID string        `json:"session_id"`
	Repo      string        `json:"repo"`
	Role      string        `json:"role"`
	Kind      TombstoneKind `json:"kind"`
	At        time.Time     `json:"at"`
	// By is the name of the operator token that cleared the session, or
	// "retention".
	By string `json:"by"`
	// Reason is redacted before it is stored.
	Reason string `json:"reason,omitempty"`
	// SessionState is the state the session was in when it was removed.
	SessionState     SessionState `json:"session_state"`
	SessionCreatedAt time.Time    `json:"session_created_at"`
	Removed          Removed      `json:"removed"`
}

// Removed counts what the removal of a session deleted with it.
type Removed struct {
	Checkpoints int64 `json:"checkpoints"`
	Runs        int64 `json:"runs"`
	Events      int64 `json:"events"`
	// Leases counts every grant row; LeasesReleased the ones still held,
	// whose resources the removal freed.
	Leases          int64 `json:"leases"`
	LeasesReleased  int64 `json:"leases_released"`
	IdempotencyKeys int64 `json:"idempotency_keys"`
}

// GoneError is ErrGone for a session that has a tombstone.
type GoneError struct{ Tombstone *Tombstone }

func (e *GoneError) Error() string {
	verb := "cleared"
	if e.Tombstone.Kind == TombstonePruned {
		verb = "pruned"
	}
	return fmt.Sprintf("session %s was %s at %s: %v", e.Tombstone.SessionID, verb,
		e.Tombstone.At.Format(time.RFC3339), ErrGone)
}

// Unwrap makes a GoneError match ErrGone.
func (e *GoneError) Unwrap() error { return ErrGone }
