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

// notes collects what one public call changes, per transaction attempt:
// inTx forgets an attempt that rolled back and hands a committed one to the
// observer. It travels in the call's context because the helpers that make
// the changes (setValidity, endLease, …) take ctx and tx, not the store.
type notes struct {
	cause    string
	validity map[checkpointd.Validity]int
	leases   map[string]int
}

type notesKey struct{}

// noting returns ctx carrying a fresh notes for cause, or ctx itself when
// nobody observes.
func (s *Store) noting(ctx context.Context, cause string) context.Context {
	if s.obs == nil {
		return ctx
	}
	return context.WithValue(ctx, notesKey{}, &notes{cause: cause})
}

func notesFrom(ctx context.Context) *notes {
	n, _ := ctx.Value(notesKey{}).(*notes)
	return n
}

func noteValidity(ctx context.Context, to checkpointd.Validity, count int) {
	if n := notesFrom(ctx); n != nil && count > 0 {
		if n.validity == nil {
			n.validity = map[checkpointd.Validity]int{}
		}
		n.validity[to] += count
	}
}

func noteLease(ctx context.Context, kind string) {
	if n := notesFrom(ctx); n != nil {
		if n.leases == nil {
			n.leases = map[string]int{}
		}
		n.leases[strings.TrimPrefix(kind, "lease.")]++
	}
}

func (n *notes) reset() {
	if n != nil {
		n.validity, n.leases = nil, nil
	}
}

// flush hands what a committed transaction changed to the observer.
func (s *Store) flush(n *notes) {
	if n == nil || s.obs == nil {
		return
	}
	for to, c := range n.validity {
		s.obs.ValidityChanged(n.cause, to, c)
	}
	for kind, c := range n.leases {
		for range c {
			s.obs.LeaseEvent(kind)
		}
	}
	n.reset()
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
