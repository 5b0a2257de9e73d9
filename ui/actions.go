package ui

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/client"
)

type confirmData struct {
	Verb, What, Effect, Action string
	SessionID, Repo, Lease     string
	Outcome, Danger            bool
}

// confirm asks before an operator action, naming the session.
func (c *console) confirm(r *http.Request, s *consoleSession) (string, view, error) {
	id := chi.URLParam(r, "id")
	sess, err := c.api(s).Sessions().Get(r.Context(), id)
	if err != nil {
		return "", view{}, err
	}
	d := confirmData{SessionID: sess.ID, Repo: sess.Repo}
	base := "/ui/sessions/" + url.PathEscape(id)
	switch r.URL.Query().Get("action") {
	case "park":
		d.Verb, d.What, d.Action = "park", "Park", base+"/park"
		d.Effect = "Its current run is superseded and fenced off (its later calls answer run_superseded); no run replaces it until one takes over. The session stays active and resumable."
	case "end":
		d.Verb, d.What, d.Action, d.Outcome = "end", "End", base+"/end", true
		d.Effect = "The session ends on your behalf and releases its leases; the event names your token and the reason."
	case "clear":
		d.Verb, d.What, d.Action, d.Danger = "force-clear", "Force-clear", base+"/clear", true
		d.Effect = "Deletes the session with its checkpoints, runs, leases and events for good; a tombstone records the clear. This cannot be undone."
	case "release":
		lease := r.URL.Query().Get("lease")
		if !checkpointd.ValidID(lease) {
			return "", view{}, notFound("no such lease")
		}
		d.Verb, d.What, d.Action, d.Lease = "release", "Force-release lease "+lease+" of", "/ui/leases/"+url.PathEscape(lease)+"/release", lease
		d.Effect = "The holder loses the lease at once; its checkpoints that name it read lease_lost."
	default:
		return "", view{}, notFound("no such action")
	}
	return "confirm", view{Title: "Confirm", Nav: "fleet", Data: d}, nil
}

func reason(r *http.Request) string { return strings.TrimSpace(r.PostFormValue("reason")) }

// The actions are the API calls the CLI makes.

func (c *console) park(r *http.Request, s *consoleSession) (string, error) {
	id := chi.URLParam(r, "id")
	_, err := c.api(s).Sessions().Park(r.Context(), id, reason(r))
	return "/ui/sessions/" + url.PathEscape(id) + "?done=parked", err
}

func (c *console) end(r *http.Request, s *consoleSession) (string, error) {
	id := chi.URLParam(r, "id")
	_, err := c.api(s).Sessions().End(r.Context(), id, &client.EndRequest{
		Outcome: checkpointd.Outcome(r.PostFormValue("outcome")), Reason: reason(r)})
	return "/ui/sessions/" + url.PathEscape(id) + "?done=ended", err
}

func (c *console) clear(r *http.Request, s *consoleSession) (string, error) {
	id := chi.URLParam(r, "id")
	err := c.api(s).Sessions().Clear(r.Context(), id, reason(r))
	return "/ui/?done=cleared", err
}

// release force-releases a lease (DELETE /v1/leases/{id} without run_id,
// as `checkpointd leases release` does) and goes back to its session.
func (c *console) release(r *http.Request, s *consoleSession) (string, error) {
	id := chi.URLParam(r, "id")
	err := c.api(s).Leases().Release(r.Context(), id, "")
	if sid := r.PostFormValue("session"); checkpointd.ValidID(sid) {
		return "/ui/sessions/" + url.PathEscape(sid) + "?done=released", err
	}
	return "/ui/leases?done=released", err
}

func (c *console) startDrain(r *http.Request, s *consoleSession) (string, error) {
	_, err := c.api(s).Drain().Start(r.Context(), reason(r))
	return "/ui/drain?done=started", err
}

func (c *console) completeDrain(r *http.Request, s *consoleSession) (string, error) {
	_, err := c.api(s).Drain().Complete(r.Context(), client.CompleteOptions{})
	if p, ok := asProblem(err); ok && p.Code == "drain_blocked" {
		return "/ui/drain", nil // the page lists what blocks
	}
	return "/ui/drain?done=completed", err
}

func (c *console) cancelDrain(r *http.Request, s *consoleSession) (string, error) {
	_, err := c.api(s).Drain().Cancel(r.Context())
	return "/ui/drain?done=cancelled", err
}

func (c *console) reconcileNow(r *http.Request, s *consoleSession) (string, error) {
	_, err := c.api(s).Reconcile().Run(r.Context())
	return "/ui/reconcile?done=reconcile", err
}
