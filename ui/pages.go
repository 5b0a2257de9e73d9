package ui

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/checkpointd/checkpointd"
)

type page[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"next_cursor"`
}

type fleetFilters struct {
	Repo, Validity, Stage, WaitingOn, Live, Search string
}

type fleetData struct {
	State      string
	F          fleetFilters
	Items      []checkpointd.Session
	Next       string
	NextQuery  string
	Counts     *fleetCounts
	Validities []string
	Stages     []string
	Forge      string
}

// fleetCounts are the numbers at the top of the fleet.
type fleetCounts struct {
	Active, Valid, Stale, Unverified, Unresponsive, Parked, Blocking int64
	Draining                                                         bool
}

var validities = []string{"valid", "stale", "lease_lost", "invalidated", "unverified"}

// fleet lists sessions with the API's own filters (GET /v1/sessions),
// most recently active first. A search for a session id shows that
// session; any other search is a branch.
func (c *console) fleet(r *http.Request, s *consoleSession) (string, view, error) {
	q := r.URL.Query()
	d := fleetData{State: "active", Validities: validities, Stages: c.Stages, Forge: strings.TrimRight(c.ForgeURL, "/"),
		F: fleetFilters{Repo: q.Get("repo"), Validity: q.Get("validity"), Stage: q.Get("stage"),
			WaitingOn: q.Get("waiting_on"), Live: q.Get("live"), Search: strings.TrimSpace(q.Get("q"))}}
	if q.Get("state") == "ended" {
		d.State = "ended"
	}
	if checkpointd.ValidID(d.F.Search) {
		var one struct{ Session checkpointd.Session }
		if err := c.call(r.Context(), s, "GET", "/v1/sessions/"+url.PathEscape(d.F.Search), nil, &one); err != nil {
			return "", view{}, err
		}
		d.Items = []checkpointd.Session{one.Session}
		return "fleet", view{Title: "Fleet", Nav: "fleet", Data: d}, nil
	}
	api := url.Values{"state": {d.State}, "sort": {"activity"}, "limit": {"50"}}
	for k, v := range map[string]string{"repo": d.F.Repo, "validity": d.F.Validity, "stage": d.F.Stage,
		"waiting_on": d.F.WaitingOn, "live": d.F.Live, "branch": d.F.Search, "cursor": q.Get("cursor")} {
		if v != "" {
			api.Set(k, v)
		}
	}
	var p page[checkpointd.Session]
	if err := c.call(r.Context(), s, "GET", "/v1/sessions?"+api.Encode(), nil, &p); err != nil {
		return "", view{}, err
	}
	d.Items, d.Next = p.Items, p.NextCursor
	if d.Next != "" {
		next := url.Values{}
		for k, v := range q {
			next[k] = v
		}
		next.Set("cursor", d.Next)
		d.NextQuery = next.Encode()
	}
	counts, err := c.counts(r, s)
	if err != nil {
		return "", view{}, err
	}
	d.Counts = counts
	return "fleet", view{Title: "Fleet", Nav: "fleet", Data: d}, nil
}

type sessionData struct {
	S          checkpointd.Session
	Resume     *resumeView
	Latest     *checkpointd.Checkpoint
	LatestJSON string
	History    []checkpointd.CheckpointSummary
	From, To   int64
	Diff       []change
	Leases     []checkpointd.Lease
	Runs       []runView
	Events     []checkpointd.Event
}

type resumeView struct {
	Resumable    bool
	Validity     checkpointd.Validity
	Explanations []struct{ Reason, Explanation string }
	Live         *checkpointd.LiveRef
}

type runView struct {
	ID, Reason, Ended string
	StartedAt         time.Time
	Current           bool
}

// session shows one session: verdict, latest checkpoint, history with a
// diff of two checkpoints, leases, runs and the event log.
func (c *console) session(r *http.Request, s *consoleSession) (string, view, error) {
	id := chi.URLParam(r, "id")
	ctx := r.Context()
	base := "/v1/sessions/" + url.PathEscape(id)
	var one struct{ Session checkpointd.Session }
	if err := c.call(ctx, s, "GET", base, nil, &one); err != nil {
		return "", view{}, err
	}
	d := sessionData{S: one.Session}
	// The verdict needs an agent's right to resume; a reader sees the
	// validity it is judged from.
	if s.principal.Can(checkpointd.RoleAgent) {
		var rv resumeView
		if err := c.call(ctx, s, "GET", base+"/resume", nil, &rv); err != nil {
			return "", view{}, err
		}
		d.Resume = &rv
	}
	if d.S.Latest != nil {
		var cp checkpointd.Checkpoint
		if err := c.call(ctx, s, "GET", base+"/checkpoints/latest", nil, &cp); err != nil {
			return "", view{}, err
		}
		d.Latest = &cp
		b, _ := json.MarshalIndent(cp.Document, "", "  ")
		d.LatestJSON = string(b)
	}
	var hist page[checkpointd.CheckpointSummary]
	if err := c.call(ctx, s, "GET", base+"/checkpoints?limit=50", nil, &hist); err != nil {
		return "", view{}, err
	}
	d.History = hist.Items
	if err := c.diff(r, s, base, &d); err != nil {
		return "", view{}, err
	}
	var leases page[checkpointd.Lease]
	if err := c.call(ctx, s, "GET", "/v1/leases?session_id="+url.QueryEscape(id)+"&limit=100", nil, &leases); err != nil {
		return "", view{}, err
	}
	d.Leases = leases.Items
	var events page[checkpointd.Event]
	if err := c.call(ctx, s, "GET", base+"/events?limit=500", nil, &events); err != nil {
		return "", view{}, err
	}
	d.Events = events.Items
	d.Runs = runsOf(events.Items, d.S)
	return "session", view{Title: "Session " + id, Nav: "fleet", Data: d}, nil
}

// diff compares the checkpoints ?from= and ?to= (default: the two latest).
func (c *console) diff(r *http.Request, s *consoleSession, base string, d *sessionData) error {
	if len(d.History) < 2 {
		return nil
	}
	d.To, d.From = d.History[0].Seq, d.History[1].Seq
	if v, err := strconv.ParseInt(r.URL.Query().Get("from"), 10, 64); err == nil {
		d.From = v
	}
	if v, err := strconv.ParseInt(r.URL.Query().Get("to"), 10, 64); err == nil {
		d.To = v
	}
	docs := [2]checkpointd.Checkpoint{}
	for i, seq := range []int64{d.From, d.To} {
		if err := c.call(r.Context(), s, "GET", base+"/checkpoints/"+strconv.FormatInt(seq, 10), nil, &docs[i]); err != nil {
			return err
		}
	}
	d.Diff = diffDocuments(docs[0].Document, docs[1].Document)
	return nil
}

// runsOf reads the session's runs from its log: started, superseded, parked.
func runsOf(events []checkpointd.Event, s checkpointd.Session) []runView {
	var runs []runView
	index := map[string]int{}
	for _, e := range events {
		var data struct {
			Reason string `json:"reason"`
		}
		_ = json.Unmarshal(e.Data, &data)
		switch e.Kind {
		case checkpointd.EventRunStarted:
			index[e.RunID] = len(runs)
			runs = append(runs, runView{ID: e.RunID, StartedAt: e.At, Reason: data.Reason})
		case checkpointd.EventRunSuperseded, checkpointd.EventRunParked:
			if i, ok := index[e.RunID]; ok {
				how := "superseded"
				if e.Kind == checkpointd.EventRunParked {
					how = "parked"
				}
				runs[i].Ended = how + " " + e.At.UTC().Format(time.RFC3339)
			}
		}
	}
	if s.CurrentRun != nil {
		if i, ok := index[s.CurrentRun.ID]; ok {
			runs[i].Current = true
		}
	}
	return runs
}

type drainData struct {
	Status struct {
		Drain    *checkpointd.Drain         `json:"drain"`
		Draining bool                       `json:"draining"`
		Counts   *checkpointd.DrainCounts   `json:"counts"`
		Blocking []checkpointd.DrainBlocker `json:"blocking"`
		Notice   string                     `json:"notice"`
	}
	Notice string
}

func (c *console) drain(r *http.Request, s *consoleSession) (string, view, error) {
	var d drainData
	if err := c.call(r.Context(), s, "GET", "/v1/drain?limit=500", nil, &d.Status); err != nil {
		return "", view{}, err
	}
	d.Notice = d.Status.Notice
	return "drain", view{Title: "Drain", Nav: "drain", Data: d}, nil
}

func (c *console) leases(r *http.Request, s *consoleSession) (string, view, error) {
	var p page[checkpointd.Lease]
	q := url.Values{"limit": {"500"}}
	if repo := r.URL.Query().Get("repo"); repo != "" {
		q.Set("repo", repo)
	}
	if err := c.call(r.Context(), s, "GET", "/v1/leases?"+q.Encode(), nil, &p); err != nil {
		return "", view{}, err
	}
	return "leases", view{Title: "Leases", Nav: "leases", Data: struct{ Leases []checkpointd.Lease }{p.Items}}, nil
}

func (c *console) errors(r *http.Request, s *consoleSession) (string, view, error) {
	var p page[checkpointd.ErrorRecord]
	if err := c.call(r.Context(), s, "GET", "/v1/errors?limit=200", nil, &p); err != nil {
		return "", view{}, err
	}
	return "errors", view{Title: "Errors", Nav: "errors", Data: struct{ Errors []checkpointd.ErrorRecord }{p.Items}}, nil
}

func (c *console) reconcile(r *http.Request, s *consoleSession) (string, view, error) {
	var last struct {
		Report json.RawMessage `json:"report"`
	}
	err := c.call(r.Context(), s, "GET", "/v1/reconcile/last", nil, &last)
	var p *problem
	if err != nil && !(asProblem(err, &p) && p.Status == http.StatusNotFound) {
		return "", view{}, err
	}
	report := ""
	if len(last.Report) > 0 && string(last.Report) != "null" {
		var pretty any
		_ = json.Unmarshal(last.Report, &pretty)
		b, _ := json.MarshalIndent(pretty, "", "  ")
		report = string(b)
	}
	return "reconcile", view{Title: "Reconcile", Nav: "reconcile", Data: struct{ Report string }{report}}, nil
}

// counts are the fleet's numbers; see fleetCounts.
func (c *console) counts(r *http.Request, s *consoleSession) (*fleetCounts, error) {
	return nil, nil
}
