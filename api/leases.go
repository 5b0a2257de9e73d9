package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/lease"
	"github.com/checkpointd/checkpointd/store"
)

// leaseStore is what the lease handlers read; the manager (lease.Store) writes.
type leaseStore interface {
	lease.Store
	GetLease(ctx context.Context, id string) (*checkpointd.Lease, error)
	ListLeases(ctx context.Context, f store.LeaseFilter) ([]checkpointd.Lease, error)
}

type acquireRequest struct {
	Resource   checkpointd.Resource `json:"resource"`
	SessionID  string               `json:"session_id"`
	RunID      string               `json:"run_id"`
	TTLSeconds int64                `json:"ttl_seconds"`
}

func (a *api) acquireLease(w http.ResponseWriter, r *http.Request) error {
	var q acquireRequest
	if err := decode(w, r, &q); err != nil {
		return err
	}
	// The resource is matched as named (identifiers.go): one that looks
	// like a secret is refused, never stored in the lease or its event.
	if ps := identifying([2]string{"/resource/repo", q.Resource.Repo}, [2]string{"/resource/branch", q.Resource.Branch}); ps != nil {
		return &checkpointd.ValidationError{Kind: checkpointd.ErrInvalidRequest, Problems: ps}
	}
	l, err := a.Leases.Acquire(r.Context(), lease.Request{Resource: q.Resource, SessionID: q.SessionID,
		RunID: q.RunID, TTLSeconds: q.TTLSeconds, InScope: principal(r).InScope})
	var held *store.LeaseHeldError
	if errors.As(err, &held) {
		// A run waiting for a lease is alive: the refusal
		// rolled its sighting back, so it is recorded on its own. The
		// store checked the scope before it answered lease_held, and a
		// sighting that fails changes nothing of this answer.
		_, _ = a.Store.Sessions.SeeRun(r.Context(), q.SessionID, q.RunID)
		// The 409 names the holder, so the caller knows whom it waits for.
		h := held.Lease
		return &ProblemError{Err: err, Extra: map[string]any{"holder": map[string]any{
			"lease_id": h.ID, "session_id": h.Holder.SessionID, "run_id": h.Holder.RunID,
			"fencing_token": h.FencingToken, "expires_at": h.ExpiresAt}}}
	}
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/leases/"+l.ID)
	return writeJSON(w, http.StatusCreated, map[string]any{"lease": l})
}

// loadLease reads the lease named in the path and checks the caller's scope.
func (a *api) loadLease(r *http.Request) (*checkpointd.Lease, error) {
	id := chi.URLParam(r, "id")
	if !checkpointd.ValidID(id) {
		return nil, fmt.Errorf("no such lease: %w", checkpointd.ErrNotFound)
	}
	if err := a.settled(r.Context()); err != nil {
		return nil, err
	}
	l, err := a.Store.Leases.GetLease(r.Context(), id)
	if err != nil {
		return nil, err
	}
	if err := inScope(r, l.Resource.Repo); err != nil {
		return nil, err
	}
	return l, nil
}

type renewRequest struct {
	RunID      string `json:"run_id"`
	TTLSeconds int64  `json:"ttl_seconds"`
}

func (a *api) renewLease(w http.ResponseWriter, r *http.Request) error {
	var q renewRequest
	if err := decode(w, r, &q); err != nil {
		return err
	}
	l, err := a.loadLease(r)
	if err != nil {
		return err
	}
	if q.TTLSeconds == 0 {
		// Renew for the lease's last term unless told otherwise.
		q.TTLSeconds = l.TTLSeconds
	}
	renewed, err := a.Leases.Renew(r.Context(), l.ID, q.RunID, q.TTLSeconds)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"lease": renewed})
}

// releaseLease ends a lease. An agent names its run (?run_id=); an operator
// without a run id force-releases.
func (a *api) releaseLease(w http.ResponseWriter, r *http.Request) error {
	l, err := a.loadLease(r)
	if err != nil {
		return err
	}
	runID := r.URL.Query().Get("run_id")
	force := runID == "" && principal(r).Role == checkpointd.RoleOperator
	if !force && !checkpointd.ValidID(runID) {
		return checkpointd.Invalid("run_id", "required: the run that holds the lease (operators may omit it to force-release)")
	}
	if err := a.Leases.Release(r.Context(), l.ID, runID, force); err != nil {
		return err
	}
	if force {
		a.logAction(r, "release", slog.String("lease", l.ID), slog.String("session", l.Holder.SessionID))
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *api) listLeases(w http.ResponseWriter, r *http.Request) error {
	limit, c, err := page(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	f := store.LeaseFilter{Repo: q.Get("repo"), Kind: checkpointd.ResourceKind(q.Get("kind")), SessionID: q.Get("session_id"),
		State: checkpointd.LeaseState(q.Get("state")), Scope: principal(r).ScopeFilter(), Before: c.ID, Limit: limit}
	if f.Repo != "" && !checkpointd.ValidRepo(f.Repo) {
		return checkpointd.Invalid("repo", "must be owner/name")
	}
	switch f.Kind {
	case "", checkpointd.ResourceIssue, checkpointd.ResourcePR, checkpointd.ResourceBranch:
	default:
		return checkpointd.Invalid("kind", "must be issue, pr or branch")
	}
	switch f.State {
	case "", checkpointd.LeaseHeld, checkpointd.LeaseReleased, checkpointd.LeaseExpired:
	default:
		return checkpointd.Invalid("state", "must be held, released or expired")
	}
	if f.SessionID != "" && !checkpointd.ValidID(f.SessionID) {
		return checkpointd.Invalid("session_id", "not a session id")
	}
	if p := q.Get("id_prefix"); p != "" {
		if !idPrefixPattern.MatchString(p) {
			return checkpointd.Invalid("id_prefix", "must be the start of a lease id: 1-64 of a-z, 0-9 and _")
		}
		f.IDPrefix = p
	}
	// A resource is named by kind, repo and number or branch.
	if num, branch := q.Get("number"), q.Get("branch"); num != "" || branch != "" {
		res := checkpointd.Resource{Kind: f.Kind, Repo: f.Repo, Branch: branch}
		if num != "" {
			if res.Number, err = strconv.ParseInt(num, 10, 64); err != nil {
				return checkpointd.Invalid("number", "must be a number")
			}
		}
		if ps := res.Validate(""); ps != nil {
			return &checkpointd.ValidationError{Kind: checkpointd.ErrInvalidRequest, Problems: ps}
		}
		f.Resource = &res
	}
	if err := a.settled(r.Context()); err != nil {
		return err
	}
	items, err := a.Store.Leases.ListLeases(r.Context(), f)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, newList(items, limit, func(l checkpointd.Lease) cursor { return cursor{ID: l.ID} }))
}
