package api

import (
	"fmt"
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
	return writeJSON(w, http.StatusOK, sessionResponse{Session: parked})
}
