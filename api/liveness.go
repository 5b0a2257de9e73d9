package api

import (
	"errors"
	"net/http"

	"github.com/checkpointd/checkpointd"
)

type heartbeatRequest struct {
	RunID string `json:"run_id"`
}

// runLiveness is the run part of a heartbeat answer.
type runLiveness struct {
	ID         string `json:"id"`
	LastSeenAt any    `json:"last_seen_at"`
	Live       bool   `json:"live"`
}

// heartbeat records that the session's current run is alive:
// for an agent that is thinking and not writing. Any other call of the run
// counts too.
func (a *api) heartbeat(w http.ResponseWriter, r *http.Request) error {
	var q heartbeatRequest
	if err := decode(w, r, &q); err != nil {
		return err
	}
	if !checkpointd.ValidID(q.RunID) {
		return &checkpointd.ValidationError{Kind: checkpointd.ErrInvalidRequest,
			Problems: []checkpointd.Problem{{Path: "/run_id", Message: "required"}}}
	}
	sess, err := a.loadSession(r)
	if err != nil {
		return err
	}
	run, err := a.Store.Sessions.SeeRun(r.Context(), sess.ID, q.RunID)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"run": runLiveness{ID: run.ID, LastSeenAt: run.LastSeenAt, Live: *run.Live}})
}

// resumeSighting records a resume that names its run (?run_id=) as a
// sighting of that run and shows it in sess. A resume naming a run that is
// no longer current is answered all the same: the verdict is what such a
// run needs to learn that it was superseded.
func (a *api) resumeSighting(r *http.Request, sess *checkpointd.Session) error {
	runID := r.URL.Query().Get("run_id")
	if runID == "" || sess.CurrentRun == nil || runID != sess.CurrentRun.ID {
		return nil
	}
	run, err := a.Store.Sessions.SeeRun(r.Context(), sess.ID, runID)
	if errors.Is(err, checkpointd.ErrRunSuperseded) || errors.Is(err, checkpointd.ErrSessionEnded) {
		return nil
	}
	if err != nil {
		return err
	}
	sess.CurrentRun.LastSeenAt, sess.CurrentRun.Live = run.LastSeenAt, run.Live
	return nil
}
