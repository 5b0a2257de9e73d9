package api

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/checkpointd/checkpointd"
)

type clearRequest struct {
	Reason string `json:"reason"`
}

// clearSession force-clears a session (DELETE /v1/sessions/{id}, operators
// only): the session goes with everything it owns, in one transaction, and
// its tombstone records who cleared it, when, why (redacted) and what went.
// 204; 404 unknown; 410 gone when already cleared or pruned.
func (a *api) clearSession(w http.ResponseWriter, r *http.Request) error {
	id := chi.URLParam(r, "id")
	body, err := readBody(w, r, checkpointd.MaxRequestBytes)
	if err != nil {
		return err
	}
	var q clearRequest
	if len(bytes.TrimSpace(body)) > 0 {
		if err := decodeBody(body, &q); err != nil {
			return err
		}
	}
	if len(q.Reason) > checkpointd.MaxReasonLength {
		return checkpointd.Invalid("/reason", fmt.Sprintf("at most %d bytes", checkpointd.MaxReasonLength))
	}
	if err := redactFields(&q.Reason); err != nil {
		return err
	}
	if !checkpointd.ValidID(id) {
		return fmt.Errorf("no such session: %w", checkpointd.ErrNotFound)
	}
	if _, err := a.Store.Sessions.ClearSession(r.Context(), id, principal(r).Name, q.Reason); err != nil {
		return err
	}
	a.logAction(r, "force-clear", slog.String("session", id), slog.String("reason", q.Reason))
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// goneExtra is what a 410 tells about the tombstone: its kind and time,
// never the operator's reason.
func goneExtra(g *checkpointd.GoneError) map[string]any {
	return map[string]any{"session_id": g.Tombstone.SessionID, "kind": g.Tombstone.Kind, "at": g.Tombstone.At}
}

// tombstoneExtra is the whole tombstone, for an operator's 410: who removed
// the session, why (redacted when it was stored) and what went with it.
// It is the audit record of the removal, and operators are who may clear.
func tombstoneExtra(t *checkpointd.Tombstone) map[string]any {
	return map[string]any{"session_id": t.SessionID, "repo": t.Repo, "role": t.Role, "kind": t.Kind, "at": t.At,
		"by": t.By, "reason": t.Reason, "session_state": t.SessionState, "session_created_at": t.SessionCreatedAt,
		"removed": t.Removed}
}

// goneInScope answers a tombstoned session outside the caller's scope as
// forbidden, as a live one would be: a 410 would tell when it went. An
// operator's 410 carries the whole tombstone; other roles get its kind
// and time only (goneExtra).
func goneInScope(r *http.Request, err error) error {
	var ge *checkpointd.GoneError
	if !errors.As(err, &ge) {
		return err
	}
	p := principal(r)
	if !p.InScope(ge.Tombstone.Repo) {
		return checkpointd.OutOfScope()
	}
	var pe *ProblemError
	if p.Can(checkpointd.RoleOperator) && !errors.As(err, &pe) {
		return &ProblemError{Err: err, Extra: tombstoneExtra(ge.Tombstone)}
	}
	return err
}
