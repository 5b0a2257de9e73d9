// Package lease implements fenced leases on issues, PRs and branches on top
// of the store's atomic primitives: request validation, and the worker that
// expires leases whose holders stopped renewing them.
package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
)

// Store is what leases need of persistence.
type Store interface {
	AcquireLease(ctx context.Context, in store.NewLease) (*checkpointd.Lease, error)
	RenewLease(ctx context.Context, id, runID string, ttl time.Duration) (*checkpointd.Lease, error)
	ReleaseLease(ctx context.Context, id, runID string, force bool) error
	ExpireLeases(ctx context.Context, limit int) (int, error)
}

// Manager grants, renews and releases leases and expires them on time.
type Manager struct {
	store Store
	log   *slog.Logger
	// Interval is how often the worker looks for expired leases. Expiry is
	// also enforced at every acquire, renew and write, and every read that
	// reports validity or leases ends expired leases first, so the worker
	// only bounds how late the events are recorded when nobody reads.
	Interval time.Duration
	// Batch bounds one expiry transaction's work.
	Batch int
}

// NewManager returns a Manager over s.
func NewManager(s Store, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Manager{store: s, log: log, Interval: 5 * time.Second, Batch: 200}
}

// Request is an acquire request as the API receives it.
type Request struct {
	Resource   checkpointd.Resource
	SessionID  string
	RunID      string
	TTLSeconds int64
	InScope    func(repo string) bool
}

// TTL checks a requested TTL against the documented bounds.
// Errors: ErrInvalidRequest.
func TTL(seconds int64, path string) (time.Duration, error) {
	ttl := time.Duration(seconds) * time.Second
	if seconds <= 0 || ttl < checkpointd.MinLeaseTTL || ttl > checkpointd.MaxLeaseTTL {
		return 0, checkpointd.Invalid(path, fmt.Sprintf("must be between %d and %d seconds",
			int64(checkpointd.MinLeaseTTL/time.Second), int64(checkpointd.MaxLeaseTTL/time.Second)))
	}
	return ttl, nil
}

// Acquire grants the resource to the session's current run.
// Errors: ErrInvalidRequest, and the store's (ErrLeaseHeld with the holder,
// ErrRunSuperseded, ErrSessionEnded, ErrNotFound, ErrForbidden).
func (m *Manager) Acquire(ctx context.Context, r Request) (*checkpointd.Lease, error) {
	ps := r.Resource.Validate("/resource")
	if !checkpointd.ValidID(r.SessionID) {
		ps = append(ps, checkpointd.Problem{Path: "/session_id", Message: "required"})
	}
	if !checkpointd.ValidID(r.RunID) {
		ps = append(ps, checkpointd.Problem{Path: "/run_id", Message: "required"})
	}
	ttl, err := TTL(r.TTLSeconds, "/ttl_seconds")
	if err != nil {
		var ve *checkpointd.ValidationError
		if errors.As(err, &ve) {
			ps = append(ps, ve.Problems...)
		}
	}
	if ps != nil {
		return nil, &checkpointd.ValidationError{Kind: checkpointd.ErrInvalidRequest, Problems: ps}
	}
	return m.store.AcquireLease(ctx, store.NewLease{Resource: r.Resource, SessionID: r.SessionID,
		RunID: r.RunID, TTL: ttl, InScope: r.InScope})
}

// Renew extends a lease held by runID. Errors: ErrInvalidRequest,
// ErrNotFound, ErrLeaseLost.
func (m *Manager) Renew(ctx context.Context, id, runID string, ttlSeconds int64) (*checkpointd.Lease, error) {
	if !checkpointd.ValidID(runID) {
		return nil, checkpointd.Invalid("/run_id", "required")
	}
	ttl, err := TTL(ttlSeconds, "/ttl_seconds")
	if err != nil {
		return nil, err
	}
	return m.store.RenewLease(ctx, id, runID, ttl)
}

// Release ends a lease: by its holding run, or by an operator (force).
// Errors: ErrNotFound, ErrLeaseLost.
func (m *Manager) Release(ctx context.Context, id, runID string, force bool) error {
	return m.store.ReleaseLease(ctx, id, runID, force)
}

// ExpireOnce ends every lease whose time ran out, in bounded batches, and
// returns how many it ended.
func (m *Manager) ExpireOnce(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := m.store.ExpireLeases(ctx, m.Batch)
		total += n
		if err != nil || n < m.Batch {
			return total, err
		}
	}
}

// Run expires leases every Interval until ctx ends. Errors are logged and
// retried on the next tick: a store outage must not stop the worker.
func (m *Manager) Run(ctx context.Context) error {
	t := time.NewTicker(m.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			n, err := m.ExpireOnce(ctx)
			if err != nil && ctx.Err() == nil {
				m.log.Warn("lease expiry failed", slog.Any("err", err))
			}
			if n > 0 {
				m.log.Info("leases expired", slog.Int("count", n))
			}
		}
	}
}
