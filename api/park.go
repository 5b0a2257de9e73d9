package api

import (
	"fmt"
	"log/slog"
	"net/http"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
)

type parkRequest struct {
	Reason string `json:"reason"`
}

// operatorReason validates and redacts the reason an operator gives for
// acting on a session; required says whether it may be empty.
func operatorReason(reason *string, required bool) error {
	switch {
	case required && *reason == "":
		return checkpointd.Invalid("/reason", "required: say why, for the session's event log")
	case len(*reason) > checkpointd.MaxReasonLength:
		return checkpointd.Invalid("/reason", fmt.Sprintf("at most %d bytes", checkpointd.MaxReasonLength))
	}
	return redactFields(reason)
}

// operatorOf names the caller for the audit trail: its token's name and
// id, never the secret.
func operatorOf(r *http.Request) store.Operator {
	p := principal(r)
	return store.Operator{TokenID: p.TokenID, Name: p.Name}
}

// logAction writes the one line an operator's action leaves in the log:
// what, by whom (the token's name and id, never its secret), on what and
// why (reasons are redacted before this).
func (a *api) logAction(r *http.Request, action string, attrs ...slog.Attr) {
	op := operatorOf(r)
	a.log.LogAttrs(r.Context(), slog.LevelInfo, "operator action",
		append([]slog.Attr{slog.String("action", action), slog.String("actor", op.Name), slog.String("actor_token", op.TokenID)}, attrs...)...)
}

// parkSession supersedes the session's current run without starting one:
// for an agent that died or must stop, also during a
// drain. The session stays active and resumable; the next run takes over.
func (a *api) parkSession(w http.ResponseWriter, r *http.Request) error {
	var q parkRequest
	if err := decode(w, r, &q); err != nil {
		return err
	}
	if err := operatorReason(&q.Reason, true); err != nil {
		return err
	}
	sess, err := a.loadSession(r)
	if err != nil {
		return err
	}
	parked, err := a.Store.Sessions.ParkSession(r.Context(), sess.ID, operatorOf(r), q.Reason, principal(r).InScope)
	if err != nil {
		return err
	}
	a.logAction(r, "park", slog.String("session", sess.ID), slog.String("reason", q.Reason))
	return writeJSON(w, http.StatusOK, sessionResponse{Session: parked})
}
