package client

import (
	"context"
	"iter"
	"net/http"
	"net/url"
	"strconv"

	"github.com/google/uuid"

	"github.com/checkpointd/checkpointd"
)

// Sessions calls the session routes (/v1/sessions…).
type Sessions struct{ c *Client }

// CreateSessionRequest is the body of POST /v1/sessions: the session's
// target and role, and the agent of its first run.
type CreateSessionRequest struct {
	Repo         string            `json:"repo"`
	Role         string            `json:"role"`
	Issue        int64             `json:"issue,omitempty"`
	PR           int64             `json:"pr,omitempty"`
	Branch       string            `json:"branch,omitempty"`
	Agent        checkpointd.Agent `json:"agent"`
	Worktree     string            `json:"worktree,omitempty"`
	Capabilities []string          `json:"capabilities,omitempty"`
}

// WriteOptions are the options of a write the daemon deduplicates.
type WriteOptions struct {
	// IdempotencyKey makes a repeat of the write (same key, same body) a
	// replay of the first answer, also after a crash of the caller. Empty:
	// the Client draws a random key for this call, so its own retries are
	// replays; persist your own key to survive your restart.
	IdempotencyKey string
}

func (o *WriteOptions) key() string {
	if o != nil && o.IdempotencyKey != "" {
		return o.IdempotencyKey
	}
	return uuid.NewString()
}

// SessionCreated is the answer of Create.
type SessionCreated struct {
	Session *checkpointd.Session `json:"session"`
	// Run is the first run: its ID and FencingToken go into every
	// checkpoint the agent writes.
	Run *checkpointd.Run `json:"run"`
	// Replayed is true when the daemon answered an earlier request of the
	// same key instead of creating another session.
	Replayed bool `json:"-"`
	// IdempotencyKey is the key the request carried.
	IdempotencyKey string `json:"-"`
}

// Create creates a session and its first run (POST /v1/sessions). It is
// retried safely: it always carries an Idempotency-Key. A drain answers
// 503 draining.
func (s *Sessions) Create(ctx context.Context, in *CreateSessionRequest, opts *WriteOptions) (*SessionCreated, error) {
	r, err := newRequest(http.MethodPost, "/v1/sessions", nil, in)
	if err != nil {
		return nil, err
	}
	r.idemKey = opts.key()
	var out SessionCreated
	ans, err := s.c.call(ctx, r, &out)
	if err != nil {
		return nil, err
	}
	out.Replayed, out.IdempotencyKey = ans.replayed, r.idemKey
	return &out, nil
}

func sessionPath(id string, rest ...string) string {
	p := "/v1/sessions/" + url.PathEscape(id)
	for _, s := range rest {
		p += "/" + s
	}
	return p
}

type sessionAnswer struct {
	Session *checkpointd.Session `json:"session"`
}

type runAnswer struct {
	Run *checkpointd.Run `json:"run"`
}

// Get reads a session with its current run, latest checkpoint summary and
// validity (GET /v1/sessions/{id}). A removed session is 410 gone (see
// Error.Tombstone).
func (s *Sessions) Get(ctx context.Context, id string) (*checkpointd.Session, error) {
	var out sessionAnswer
	if err := s.c.get(ctx, sessionPath(id), nil, &out); err != nil {
		return nil, err
	}
	return out.Session, nil
}

// SessionListOptions filter GET /v1/sessions. Zero fields do not filter.
type SessionListOptions struct {
	State    checkpointd.SessionState
	Repo     string // owner/name, or owner/* for every repo of an owner
	Validity checkpointd.Validity
	// Stage, WaitingOn (the latest checkpoint's blocker.waiting_on), Live
	// (the current run's liveness) and Sort are the fleet filters; a daemon that predates them ignores them.
	Stage     string
	WaitingOn string
	Live      *bool
	Sort      string
	// Branch keeps the sessions bound to this branch (exact).
	Branch string
	// IDPrefix keeps the sessions whose id begins with it (a short id
	// a person typed).
	IDPrefix string
	// Issue and PR keep the sessions on that issue or pull request; they
	// need an exact Repo (owner/name).
	Issue, PR int64
	ListOptions
}

func (o SessionListOptions) query() url.Values {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("state", string(o.State))
	set("repo", o.Repo)
	set("validity", string(o.Validity))
	set("stage", o.Stage)
	set("waiting_on", o.WaitingOn)
	set("sort", o.Sort)
	set("branch", o.Branch)
	set("id_prefix", o.IDPrefix)
	if o.Live != nil {
		q.Set("live", strconv.FormatBool(*o.Live))
	}
	if o.Issue != 0 {
		q.Set("issue", strconv.FormatInt(o.Issue, 10))
	}
	if o.PR != 0 {
		q.Set("pr", strconv.FormatInt(o.PR, 10))
	}
	return q
}

// List reads one page of sessions, newest first.
func (s *Sessions) List(ctx context.Context, opts SessionListOptions) (*Page[checkpointd.Session], error) {
	return getPage[checkpointd.Session](ctx, s.c, "/v1/sessions", opts.query(), opts.ListOptions)
}

// All walks every session matching opts, page by page.
func (s *Sessions) All(ctx context.Context, opts SessionListOptions) iter.Seq2[checkpointd.Session, error] {
	return walk(ctx, opts.ListOptions, func(ctx context.Context, lo ListOptions) (*Page[checkpointd.Session], error) {
		o := opts
		o.ListOptions = lo
		return s.List(ctx, o)
	})
}

// StartRunRequest is the body of POST /v1/sessions/{id}/runs.
type StartRunRequest struct {
	// Takeover supersedes the current run (its later calls get 409
	// run_superseded) and moves its leases to the new run under new
	// fencing tokens. Without it a session with a current run is 409
	// run_active.
	Takeover bool              `json:"takeover,omitempty"`
	Reason   string            `json:"reason,omitempty"`
	Agent    checkpointd.Agent `json:"agent"`
	// IfRun makes a takeover conditional: it happens only while that run
	// is still the current one, or, pointing at "", only while no run is
	// (a parked session). Otherwise 409 run_changed: another claimant of
	// the handoff came first. Use IfRunIs to set it.
	IfRun *string `json:"if_run,omitempty"`
}

// IfRunIs is the IfRun of a claim on a session whose current run is
// runID ("" for a parked session).
func IfRunIs(runID string) *string { return &runID }

// RunStarted is the answer of StartRun: the new run, and the leases it
// holds, moved from the run it superseded under new fencing tokens (name
// them, with these tokens, in its checkpoints).
type RunStarted struct {
	Run    *checkpointd.Run    `json:"run"`
	Leases []checkpointd.Lease `json:"leases"`
}

// StartRun starts a run of the session. It is sent once: a second try of
// a takeover would supersede the run the first one started.
func (s *Sessions) StartRun(ctx context.Context, id string, in *StartRunRequest) (*RunStarted, error) {
	var out RunStarted
	if err := s.c.post(ctx, sessionPath(id, "runs"), in, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Takeover starts a run that supersedes the current one: what a new
// process does after reading Resume for a session whose run died. To
// claim a handoff that others may claim too, use StartRun with IfRun.
func (s *Sessions) Takeover(ctx context.Context, id, reason string, agent checkpointd.Agent) (*RunStarted, error) {
	return s.StartRun(ctx, id, &StartRunRequest{Takeover: true, Reason: reason, Agent: agent})
}

// EndRequest is the body of POST /v1/sessions/{id}/end. An operator may
// leave RunID empty to end a session on behalf of a dead agent.
type EndRequest struct {
	RunID   string              `json:"run_id,omitempty"`
	Outcome checkpointd.Outcome `json:"outcome"`
	Reason  string              `json:"reason,omitempty"`
}

// End ends the session with an outcome and releases its leases. Sent once.
func (s *Sessions) End(ctx context.Context, id string, in *EndRequest) (*checkpointd.Session, error) {
	var out sessionAnswer
	if err := s.c.post(ctx, sessionPath(id, "end"), in, &out); err != nil {
		return nil, err
	}
	return out.Session, nil
}

// Heartbeat tells the daemon the run is alive; the answer's run carries
// only ID, LastSeenAt and Live. A superseded run gets 409 run_superseded:
// stop working. Sent once (a heartbeat is cheap to send again).
func (s *Sessions) Heartbeat(ctx context.Context, id, runID string) (*checkpointd.Run, error) {
	var out runAnswer
	if err := s.c.post(ctx, sessionPath(id, "heartbeat"), map[string]string{"run_id": runID}, &out); err != nil {
		return nil, err
	}
	return out.Run, nil
}

// Park supersedes the session's current run without starting one
// (operator); the session stays active and waits for a takeover. Sent once.
func (s *Sessions) Park(ctx context.Context, id, reason string) (*checkpointd.Session, error) {
	var out sessionAnswer
	if err := s.c.post(ctx, sessionPath(id, "park"), map[string]string{"reason": reason}, &out); err != nil {
		return nil, err
	}
	return out.Session, nil
}

// Clear force-removes a stuck session with its checkpoints, leases and
// events (operator, DELETE /v1/sessions/{id}); a tombstone stays, and later
// requests naming the session get 410 gone. Sent once.
func (s *Sessions) Clear(ctx context.Context, id, reason string) error {
	var body any
	if reason != "" {
		body = map[string]string{"reason": reason}
	}
	r, err := newRequest(http.MethodDelete, sessionPath(id), nil, body)
	if err != nil {
		return err
	}
	_, err = s.c.call(ctx, r, nil)
	return err
}

// EventListOptions page a session's event log, oldest first, from the
// event after seq After.
type EventListOptions struct {
	After int64
	ListOptions
}

// Events reads one page of the session's event log.
func (s *Sessions) Events(ctx context.Context, id string, opts EventListOptions) (*Page[checkpointd.Event], error) {
	q := url.Values{}
	if opts.After > 0 && opts.Cursor == "" { // a cursor already carries where it starts; the daemon refuses both
		q.Set("after", strconv.FormatInt(opts.After, 10))
	}
	return getPage[checkpointd.Event](ctx, s.c, sessionPath(id, "events"), q, opts.ListOptions)
}

// AllEvents walks the session's event log from opts.After to its end.
func (s *Sessions) AllEvents(ctx context.Context, id string, opts EventListOptions) iter.Seq2[checkpointd.Event, error] {
	return walk(ctx, opts.ListOptions, func(ctx context.Context, lo ListOptions) (*Page[checkpointd.Event], error) {
		o := opts
		o.ListOptions = lo
		return s.Events(ctx, id, o)
	})
}
