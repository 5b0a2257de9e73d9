package store

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/checkpointd/checkpointd"
)

// Observer is told what the store changed, after the transaction that
// changed it committed, and when the database failed. Metrics implement it
// (package metrics); the store never queries anything to feed it. Methods
// are called synchronously and must be cheap.
type Observer interface {
	// ValidityChanged reports n sessions moved to validity to, by cause
	// (one of the Cause constants).
	ValidityChanged(cause string, to checkpointd.Validity, n int)
	// LeaseEvent reports one lease event: acquired, renewed, released,
	// expired or moved (the lease.* event kinds without their prefix).
	LeaseEvent(kind string)
	// StoreError reports a database failure turned into
	// ErrStoreUnavailable, by operation class: read, write or ping.
	StoreError(op string)
	// RefSettled reports that the sessions bound to one ref were re-judged
	// after its live state changed (settle.go), and how long it took.
	RefSettled(took time.Duration)
	// StoreRetry reports a write transaction tried again, by reason
	// (RetryConflict, RetryConnection).
	StoreRetry(reason string)
}

// Causes of validity changes: what the store was doing when the change
// was applied.
const (
	CauseWebhook    = "webhook"
	CauseReconcile  = "reconcile"
	CauseCheckpoint = "checkpoint"
	CauseLease      = "lease"
	CauseRestart    = "restart"
)

// Operation classes of StoreError.
const (
	OpRead  = "read"
	OpWrite = "write"
	OpPing  = "ping"
)

// SetObserver installs o. Call it before the store is used concurrently
// (as SetKeys); nil removes it.
func (s *Store) SetObserver(o Observer) { s.obs = o }

// changes collects what one attempt of a write transaction changed. The
// transaction's body starts from none (an attempt that rolled back is
// forgotten: the retry runs the body again), the helpers that make the
// changes (recordVerdict, endLease, …) are handed it, and the caller tells
// it once the transaction committed (tell).
type changes struct {
	// cause, when the body sets it, is the observer's cause instead of
	// the caller's (a settle's is whoever observed the ref last).
	cause    string
	validity map[checkpointd.Validity]int
	leases   map[string]int
	moved    []refMove
}

// refMove is sessions judged on one ref that moved together.
type refMove struct {
	repoKey, ref string
	ids          []string
	from, to     checkpointd.Validity
}

func (c *changes) reset() { *c = changes{} }

// validityMoved counts n sessions moved to validity to.
func (c *changes) validityMoved(to checkpointd.Validity, n int) {
	if n <= 0 {
		return
	}
	if c.validity == nil {
		c.validity = map[checkpointd.Validity]int{}
	}
	c.validity[to] += n
}

// lease counts one lease event (a lease.* event kind).
func (c *changes) lease(kind string) {
	if c.leases == nil {
		c.leases = map[string]int{}
	}
	c.leases[strings.TrimPrefix(kind, "lease.")]++
}

// move records sessions judged on repoKey's ref moving from one validity
// to another, for the callers that track moves (Moves).
func (c *changes) move(repoKey, ref string, ids []string, from, to checkpointd.Validity) {
	if from != to {
		c.moved = append(c.moved, refMove{repoKey, ref, ids, from, to})
	}
}

// tell hands what a committed transaction changed to the observer, by
// cause, and to the trackers of moves.
func (s *Store) tell(cause string, c *changes, track ...*Moves) {
	for _, m := range track {
		m.commit(c.moved)
	}
	if s.obs == nil {
		return
	}
	if c.cause != "" {
		cause = c.cause
	}
	for to, n := range c.validity {
		s.obs.ValidityChanged(cause, to, n)
	}
	for kind, n := range c.leases {
		for range n {
			s.obs.LeaseEvent(kind)
		}
	}
}

// connectionsLost notes that the database ended a connection of this
// store's (a listener's): others were likely ended with it, so a batch
// connection is checked before its next call (writebatch.go).
func (s *Store) connectionsLost() { s.failures.Add(1) }

// failed counts a database failure of class op, and a failed write makes
// the store not ready (ready.go). A caller that went away (context
// canceled) is not the database failing.
func (s *Store) failed(op string, err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	s.failures.Add(1)
	if op == OpWrite {
		s.writeFailed(err)
	}
	if s.obs != nil {
		s.obs.StoreError(op)
	}
}
