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
	"github.com/checkpointd/checkpointd/client"
	"github.com/checkpointd/checkpointd/internal/present"
	"github.com/checkpointd/checkpointd/reconcile"
)

type fleetFilters struct {
	Repo, Validity, Stage, WaitingOn, Live, Search string
}

type fleetData struct {
	State      string
	F          fleetFilters
	Items      []fleetRow
	Next       string
	NextURL    string
	Counts     *fleetCounts
	Validities []string
	Stages     []string
	// Unresponsive are the unresponsive sessions shown above the rest on
	// the first page of the active tab without a liveness filter; when
	// there are more than fit, UnresponsiveURL lists them all.
	Unresponsive    []fleetRow
	UnresponsiveURL string
}

// fleetRow is a session as a row of the fleet, with the forge's address
// for its links ("" without --gitea-url).
type fleetRow struct {
	checkpointd.Session
	Forge string
}

// fleetCounts are the numbers at the top of the fleet.
type fleetCounts struct {
	Active, Valid, Stale, Unverified, Unresponsive, Parked, Blocking int64
	Draining                                                         bool
}

var validities = []string{"valid", "stale", "lease_lost", "invalidated", "unverified"}

// unresponsiveFirst is how many unresponsive sessions the first page
// shows on top; more are a link to the unresponsive filter.
const unresponsiveFirst = 50

// fleet lists sessions with the API's own filters (GET /v1/sessions),
// most recently active first, the unresponsive ones on top of the first
// page (they need an operator). A search is a whole session id, the
// start of one (as the tables show it, without ses_, at least 6 digits),
// or else a branch; the start of an id that matches nothing is a branch.
func (c *console) fleet(r *http.Request, s *consoleSession) (string, view, error) {
	q := r.URL.Query()
	forge := c.forge()
	d := fleetData{State: "active", Validities: validities, Stages: c.Stages,
		F: fleetFilters{Repo: q.Get("repo"), Validity: q.Get("validity"), Stage: q.Get("stage"),
			WaitingOn: q.Get("waiting_on"), Live: q.Get("live"), Search: strings.TrimSpace(q.Get("q"))}}
	rows := func(items []checkpointd.Session) []fleetRow {
		out := make([]fleetRow, len(items))
		for i, it := range items {
			out[i] = fleetRow{Session: it, Forge: forge}
		}
		return out
	}
	if q.Get("state") == "ended" {
		d.State = "ended"
	}
	api := c.api(s)
	if strings.HasPrefix(d.F.Search, checkpointd.PrefixSession) && present.ShortID(d.F.Search) != d.F.Search {
		one, err := api.Sessions().Get(r.Context(), d.F.Search)
		if err != nil {
			return "", view{}, err
		}
		d.Items = rows([]checkpointd.Session{*one})
		return "fleet", view{Title: "Fleet", Nav: "fleet", Data: d}, nil
	}
	opts := client.SessionListOptions{State: checkpointd.SessionState(d.State), Repo: d.F.Repo,
		Validity: checkpointd.Validity(d.F.Validity), Stage: d.F.Stage, WaitingOn: d.F.WaitingOn,
		Sort: "activity", ListOptions: client.ListOptions{Limit: 50, Cursor: q.Get("cursor")}}
	if live, err := strconv.ParseBool(d.F.Live); err == nil {
		opts.Live = &live
	}
	if prefix, ok := sessionPrefix(d.F.Search); ok {
		byID := opts
		byID.IDPrefix = prefix
		p, err := api.Sessions().List(r.Context(), byID)
		if err != nil {
			return "", view{}, err
		}
		if len(p.Items) > 0 {
			opts = byID
		}
	}
	if opts.IDPrefix == "" {
		opts.Branch = d.F.Search
	}
	p, err := api.Sessions().List(r.Context(), opts)
	if err != nil {
		return "", view{}, err
	}
	d.Items, d.Next = rows(p.Items), p.NextCursor
	if d.Next != "" {
		d.NextURL = fleetURL(q, "cursor", d.Next)
	}
	if d.State == "active" && opts.Live == nil && opts.Cursor == "" {
		if err := c.unresponsiveFirst(r, api, opts, q, &d); err != nil {
			return "", view{}, err
		}
	}
	counts, err := c.counts(r, s)
	if err != nil {
		return "", view{}, err
	}
	d.Counts = counts
	return "fleet", view{Title: "Fleet", Nav: "fleet", Data: d}, nil
}

// unresponsiveFirst puts the unresponsive sessions of the filtered fleet
// above the rest. When all of them were read, the rest of the first page
// leaves them out (they are shown once); when more than fit, the page
// links to the unresponsive filter instead, and later pages (after the
// cursor) list the fleet as it is.
func (c *console) unresponsiveFirst(r *http.Request, api *client.Client, opts client.SessionListOptions, q url.Values, d *fleetData) error {
	no := false
	opts.Live, opts.Limit = &no, unresponsiveFirst
	p, err := api.Sessions().List(r.Context(), opts)
	if err != nil {
		return err
	}
	d.Unresponsive = make([]fleetRow, 0, len(p.Items))
	quiet := map[string]bool{}
	for _, it := range p.Items {
		d.Unresponsive = append(d.Unresponsive, fleetRow{Session: it, Forge: c.forge()})
		quiet[it.ID] = true
	}
	if p.NextCursor != "" {
		d.UnresponsiveURL = fleetURL(q, "live", "false")
		return nil
	}
	rest := d.Items[:0:0]
	for _, it := range d.Items {
		if !quiet[it.ID] {
			rest = append(rest, it)
		}
	}
	d.Items = rest
	return nil
}

// forge is the forge's address the console links to ("" for no links).
func (c *console) forge() string { return strings.TrimRight(c.ForgeURL, "/") }

// sessionPrefix reads a search as the start of a session id: "ses_…", or
// hex digits as the tables show an id (present.ShortID), at least 6.
func sessionPrefix(search string) (string, bool) {
	if rest, ok := strings.CutPrefix(search, checkpointd.PrefixSession); ok {
		return search, isHex(rest)
	}
	if len(search) >= 6 && isHex(search) {
		return checkpointd.PrefixSession + search, true
	}
	return "", false
}

func isHex(s string) bool {
	for _, r := range s {
		if !strings.ContainsRune("0123456789abcdef", r) {
			return false
		}
	}
	return s != ""
}

// fleetURL is the fleet page's URL with q and one value set. The whole
// URL is built here: html/template escapes a value put in a query, which
// would turn & and = into text.
func fleetURL(q url.Values, k, v string) string {
	next := url.Values{}
	for key, vs := range q {
		next[key] = vs
	}
	next.Del("cursor")
	next.Set(k, v)
	return "/ui/?" + next.Encode()
}

type sessionData struct {
	S checkpointd.Session
	// Row is S as the fleet shows it (its target linked to the forge).
	Row        fleetRow
	Resume     *client.Resume
	Latest     *checkpointd.Checkpoint
	LatestJSON string
	History    []checkpointd.CheckpointSummary
	From, To   int64
	Diff       []change
	Leases     []checkpointd.Lease
	Runs       []runView
	Events     []checkpointd.Event
}

type runView struct {
	ID, Reason string
	StartedAt  time.Time
	// Ended is how the run ended (superseded, parked), at EndedAt.
	Ended   string
	EndedAt time.Time
	Current bool
}

// session shows one session: verdict, latest checkpoint, history with a
// diff of two checkpoints, leases, runs and the event log.
func (c *console) session(r *http.Request, s *consoleSession) (string, view, error) {
	id := chi.URLParam(r, "id")
	ctx, api := r.Context(), c.api(s)
	one, err := api.Sessions().Get(ctx, id)
	if err != nil {
		return "", view{}, err
	}
	d := sessionData{S: *one, Row: fleetRow{Session: *one, Forge: c.forge()}}
	// The verdict needs an agent's right to resume; a reader sees the
	// validity it is judged from.
	if s.principal.Can(checkpointd.RoleAgent) {
		if d.Resume, err = api.Sessions().Resume(ctx, id, ""); err != nil {
			return "", view{}, err
		}
	}
	if d.S.Latest != nil {
		if d.Latest, err = api.Checkpoints().Latest(ctx, id); err != nil {
			return "", view{}, err
		}
		d.LatestJSON = indentJSON(d.Latest.Document)
	}
	hist, err := api.Checkpoints().List(ctx, id, client.ListOptions{Limit: 50})
	if err != nil {
		return "", view{}, err
	}
	d.History = hist.Items
	if err := c.diff(r, api, &d); err != nil {
		return "", view{}, err
	}
	leases, err := api.Leases().List(ctx, client.LeaseListOptions{SessionID: id, ListOptions: client.ListOptions{Limit: 100}})
	if err != nil {
		return "", view{}, err
	}
	d.Leases = leases.Items
	events, err := api.Sessions().Events(ctx, id, client.EventListOptions{ListOptions: client.ListOptions{Limit: 500}})
	if err != nil {
		return "", view{}, err
	}
	d.Events = events.Items
	d.Runs = runsOf(events.Items, d.S)
	return "session", view{Title: "Session " + id, Nav: "fleet", Data: d}, nil
}

// diff compares the checkpoints ?from= and ?to= (default: the two latest).
func (c *console) diff(r *http.Request, api *client.Client, d *sessionData) error {
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
	var docs [2]*checkpointd.Checkpoint
	for i, seq := range []int64{d.From, d.To} {
		var err error
		if docs[i], err = api.Checkpoints().Get(r.Context(), d.S.ID, seq); err != nil {
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
				runs[i].Ended, runs[i].EndedAt = how, e.At
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
	Status *client.DrainStatus
	Notice string
	// Past are the latest drains, newest first (GET /v1/drains).
	Past []checkpointd.Drain
}

func (c *console) drain(r *http.Request, s *consoleSession) (string, view, error) {
	st, err := c.api(s).Drain().Status(r.Context(), client.ListOptions{Limit: 500})
	if err != nil {
		return "", view{}, err
	}
	past, err := c.api(s).Drain().List(r.Context(), client.ListOptions{Limit: 20})
	if err != nil {
		return "", view{}, err
	}
	d := drainData{Status: st, Notice: st.Notice, Past: past.Items}
	return "drain", view{Title: "Drain", Nav: "drain", Data: d}, nil
}

func (c *console) leases(r *http.Request, s *consoleSession) (string, view, error) {
	p, err := c.api(s).Leases().List(r.Context(), client.LeaseListOptions{Repo: r.URL.Query().Get("repo"),
		State: checkpointd.LeaseHeld, ListOptions: client.ListOptions{Limit: 500}})
	if err != nil {
		return "", view{}, err
	}
	return "leases", view{Title: "Leases", Nav: "leases", Data: struct{ Leases []checkpointd.Lease }{p.Items}}, nil
}

func (c *console) errors(r *http.Request, s *consoleSession) (string, view, error) {
	p, err := c.api(s).ErrorLog().List(r.Context(), client.ErrorListOptions{ListOptions: client.ListOptions{Limit: 200}})
	if err != nil {
		return "", view{}, err
	}
	return "errors", view{Title: "Errors", Nav: "errors", Data: struct{ Errors []checkpointd.ErrorRecord }{p.Items}}, nil
}

// reconcileData is the last reconcile pass as the page shows it; Raw is
// the whole report, behind a toggle.
type reconcileData struct {
	Report *reconcile.Report
	Raw    string
	// Validities orders the verdict counts.
	Validities []string
}

func (c *console) reconcile(r *http.Request, s *consoleSession) (string, view, error) {
	last, err := c.api(s).Reconcile().Last(r.Context())
	if p, ok := asProblem(err); err != nil && !(ok && p.Status == http.StatusNotFound) {
		return "", view{}, err
	}
	d := reconcileData{Validities: validities}
	if len(last) > 0 {
		if err := json.Unmarshal(last, &d.Report); err != nil {
			return "", view{}, err
		}
		d.Raw = prettyJSON(last)
	}
	return "reconcile", view{Title: "Reconcile", Nav: "reconcile", Data: d}, nil
}

// counts are the fleet's numbers (GET /v1/fleet), with the drain's
// blocking count while a drain runs.
func (c *console) counts(r *http.Request, s *consoleSession) (*fleetCounts, error) {
	api := c.api(s)
	f, err := api.Fleet(r.Context())
	if err != nil {
		return nil, err
	}
	out := &fleetCounts{Active: f.TotalActive, Valid: f.Active[checkpointd.ValidityValid],
		Stale: f.Active[checkpointd.ValidityStale], Unverified: f.Active[checkpointd.ValidityUnverified],
		Unresponsive: f.ByLiveness[checkpointd.LivenessUnresponsive], Parked: f.ByLiveness[checkpointd.LivenessParked]}
	d, err := api.Drain().Status(r.Context(), client.ListOptions{Limit: 1})
	if err != nil {
		return nil, err
	}
	if d.Draining && d.Counts != nil {
		out.Draining, out.Blocking = true, d.Counts.Blocking
	}
	return out, nil
}
