package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/reconcile"
)

// reconcileStore is what reconcile (by default) and its report need.
type reconcileStore interface {
	reconcile.Store
	LastReconcileReport(ctx context.Context) (json.RawMessage, error)
}

// Reconciler runs a reconcile pass on demand (*reconcile.Reconciler).
type Reconciler interface {
	// Once runs a pass and returns its report. Errors: ErrStoreUnavailable.
	Once(ctx context.Context, trigger string) (*reconcile.Report, error)
}

type reportResponse struct {
	Report *reconcile.Report `json:"report"`
}

// reconcileNow runs a pass and answers with its report (operator). The
// pass is detached from the request: a client that hangs up does not cut
// it short, and it is bounded by the reconciler's own timeouts.
func (a *api) reconcileNow(w http.ResponseWriter, r *http.Request) error {
	rep, err := a.Reconciler.Once(context.WithoutCancel(r.Context()), reconcile.TriggerAPI)
	if err != nil {
		if errors.Is(err, checkpointd.ErrStoreUnavailable) || rep == nil {
			return err
		}
		// Anything else that stopped the pass early is in the report.
		a.log.WarnContext(r.Context(), "reconcile pass stopped early", slog.Any("err", err))
	}
	return writeJSON(w, http.StatusOK, reportResponse{Report: rep})
}

// lastReconcile answers the newest stored report (reader), {"report": null}
// before the first pass finished. A scoped token sees every count but only
// the per-repo details of the repos in its scope.
func (a *api) lastReconcile(w http.ResponseWriter, r *http.Request) error {
	raw, err := a.Store.Reconcile.LastReconcileReport(r.Context())
	if errors.Is(err, checkpointd.ErrNotFound) {
		return writeJSON(w, http.StatusOK, reportResponse{})
	}
	if err != nil {
		return err
	}
	var rep reconcile.Report
	if err := json.Unmarshal(raw, &rep); err != nil {
		return fmt.Errorf("%w: stored reconcile report unreadable: %w", checkpointd.ErrStoreUnavailable, err)
	}
	p := principal(r)
	return writeJSON(w, http.StatusOK, reportResponse{Report: rep.Scoped(p.InScope)})
}

// lastWorktree returns what the newest reconcile pass found in a session's
// worktree on this host, or nil (no pass yet, or no worktree checked).
func (a *api) lastWorktree(ctx context.Context, sessionID string) (*reconcile.Worktree, error) {
	raw, err := a.Store.Reconcile.LastReconcileReport(ctx)
	if errors.Is(err, checkpointd.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var rep reconcile.Report
	if err := json.Unmarshal(raw, &rep); err != nil {
		return nil, fmt.Errorf("%w: stored reconcile report unreadable: %w", checkpointd.ErrStoreUnavailable, err)
	}
	for i := range rep.Worktrees {
		if rep.Worktrees[i].SessionID == sessionID {
			return &rep.Worktrees[i], nil
		}
	}
	return nil, nil
}
