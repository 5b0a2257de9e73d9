package api

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/redact"
	"github.com/checkpointd/checkpointd/store"
)

// sessionStore is what the session handlers (and the others that read a
// session) need of persistence.
type sessionStore interface {
	CreateSession(ctx context.Context, in store.NewSession) (*checkpointd.Session, error)
	GetSession(ctx context.Context, id string) (*checkpointd.Session, error)
	SessionRepo(ctx context.Context, id string) (string, error)
	ListSessions(ctx context.Context, f store.SessionFilter) ([]checkpointd.Session, error)
	FleetCounts(ctx context.Context) (*checkpointd.FleetCounts, error)
	ListEvents(ctx context.Context, sessionID string, after int64, limit int) ([]checkpointd.Event, error)
	LiveRef(ctx context.Context, sess *checkpointd.Session) (*checkpointd.LiveRef, error)
	StartRun(ctx context.Context, sessionID string, in store.NewRun) (*store.StartedRun, error)
	SeeRun(ctx context.Context, sessionID, runID string) (*checkpointd.Run, error)
	EndSessionAs(ctx context.Context, in store.SessionEnd) (*checkpointd.Session, error)
	// Settled brings the verdicts up to date; every answer that carries a
	// session's validity or a lease's state is read after it (settled).
	Settled(ctx context.Context) error
	ParkSession(ctx context.Context, sessionID string, by store.Operator, reason string, inScope func(string) bool) (*checkpointd.Session, error)
	ClearSession(ctx context.Context, sessionID, by, reason string) (*checkpointd.Tombstone, error)
}

var rolePattern = regexp.MustCompile(`^[a-z][a-z0-9_.-]{0,63}$`)

type createSessionRequest struct {
	Repo         string            `json:"repo"`
	Role         string            `json:"role"`
	Issue        int64             `json:"issue"`
	PR           int64             `json:"pr"`
	Branch       string            `json:"branch"`
	Agent        checkpointd.Agent `json:"agent"`
	Worktree     string            `json:"worktree"`
	Capabilities []string          `json:"capabilities"`
}

func (q *createSessionRequest) validate(wf checkpointd.Workflow) error {
	var ps []checkpointd.Problem
	add := func(path, msg string) { ps = append(ps, checkpointd.Problem{Path: path, Message: msg}) }
	if !checkpointd.ValidRepo(q.Repo) {
		add("/repo", "required, as owner/name")
	}
	if !wf.HasRole(q.Role) {
		// Quote the value only when it is name-shaped: a rejected field may
		// hold anything, and problem details must never echo a secret.
		role := "role"
		if rolePattern.MatchString(q.Role) {
			role = fmt.Sprintf("role %q", q.Role)
		}
		add("/role", fmt.Sprintf("%s is not configured; configured roles: %s", role, strings.Join(wf.Roles, ", ")))
	}
	if q.Issue < 0 {
		add("/issue", "must be a positive issue number")
	}
	if q.PR < 0 {
		add("/pr", "must be a positive pull request number")
	}
	if q.Branch != "" && !checkpointd.ValidBranch(q.Branch) {
		add("/branch", fmt.Sprintf("must be 1-%d bytes without control characters", checkpointd.MaxBranchLength))
	}
	if len(q.Worktree) > checkpointd.MaxPathLength {
		add("/worktree", fmt.Sprintf("at most %d bytes", checkpointd.MaxPathLength))
	}
	for _, p := range identifying([2]string{"/repo", q.Repo}, [2]string{"/branch", q.Branch}, [2]string{"/worktree", q.Worktree}) {
		if !slices.ContainsFunc(ps, func(had checkpointd.Problem) bool { return had.Path == p.Path }) {
			ps = append(ps, p) // one problem per field: a malformed value says so first
		}
	}
	ps = append(ps, validateAgent("/agent", q.Agent)...)
	if len(q.Capabilities) > checkpointd.MaxCapabilities {
		add("/capabilities", fmt.Sprintf("at most %d items", checkpointd.MaxCapabilities))
	}
	for i, c := range q.Capabilities {
		if c == "" || len(c) > checkpointd.MaxNameLength {
			add(fmt.Sprintf("/capabilities/%d", i), fmt.Sprintf("must be 1-%d bytes", checkpointd.MaxNameLength))
		}
	}
	if ps != nil {
		return &checkpointd.ValidationError{Kind: checkpointd.ErrInvalidRequest, Problems: ps}
	}
	return nil
}

func validateAgent(path string, ag checkpointd.Agent) []checkpointd.Problem {
	var ps []checkpointd.Problem
	for _, f := range []struct{ name, v string }{{"runtime", ag.Runtime}, {"runtime_version", ag.RuntimeVersion},
		{"provider", ag.Provider}, {"model", ag.Model}, {"instance", ag.Instance}} {
		name, v := f.name, f.v
		if len(v) > checkpointd.MaxNameLength || !utf8.ValidString(v) {
			ps = append(ps, checkpointd.Problem{Path: path + "/" + name, Message: fmt.Sprintf("at most %d bytes of UTF-8", checkpointd.MaxNameLength)})
		}
	}
	return ps
}

type sessionResponse struct {
	Session *checkpointd.Session `json:"session"`
	Run     *checkpointd.Run     `json:"run,omitempty"`
}

func (a *api) createSession(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(w, r, checkpointd.MaxRequestBytes)
	if err != nil {
		return err
	}
	var q createSessionRequest
	if err := decodeBody(body, &q); err != nil {
		return err
	}
	if err := q.validate(a.Workflow); err != nil {
		return err
	}
	if err := inScope(r, q.Repo); err != nil {
		return err
	}
	// The key names the task: its repo, target and role. A
	// restarted agent sends another agent.instance, and it must get the
	// session it created back, not a conflict.
	task, _ := json.Marshal(map[string]any{"repo": strings.ToLower(q.Repo), "role": q.Role, "issue": q.Issue, "pr": q.PR, "branch": q.Branch})
	digest, err := requestDigest(a.DigestKey, task)
	if err != nil {
		return err
	}
	in := store.NewSession{Repo: q.Repo, Role: q.Role, Issue: q.Issue, PR: q.PR, Branch: q.Branch,
		Worktree: q.Worktree, Capabilities: q.Capabilities, Agent: q.Agent, CreatedBy: principal(r).TokenID}
	if err := redactSession(&in); err != nil {
		return err
	}
	// Session-creation keys are scoped to the token: the session does not
	// exist yet.
	keys := tokenKeys(r)
	keys.conflict = sessionKeyConflict
	return a.idempotent(w, r, keys, digest,
		func(idem *store.Idempotency) (any, error) {
			in.Idempotency = idem
			return a.Store.Sessions.CreateSession(r.Context(), in)
		},
		func(res any) any {
			sess := res.(*checkpointd.Session)
			w.Header().Set("Location", "/v1/sessions/"+sess.ID)
			return sessionResponse{Session: sess, Run: sess.CurrentRun}
		})
}

// sessionKeyConflict is the refusal of a session-creation key used for
// another task: it names the session the key created, which the same
// token created and may read.
func sessionKeyConflict(stored []byte) error {
	var created sessionResponse
	if json.Unmarshal(stored, &created) != nil || created.Session == nil {
		return fmt.Errorf("%w: the key was used for another repo, target or role (that request has not completed)", checkpointd.ErrIdempotencyConflict)
	}
	sess := created.Session
	return &ProblemError{Err: checkpointd.ErrIdempotencyConflict,
		Detail: fmt.Sprintf("this key created session %s for %s (%s, role %s): a key names one task; use another key for another repo, target or role",
			sess.ID, sess.Repo, sess.TargetText(), sess.Role),
		Extra: map[string]any{"session_id": sess.ID}}
}

// redactSession redacts the free-text metadata of a new session before it is
// stored: agents paste tokens anywhere. Repo, branch and worktree are
// identifying (identifiers.go): validate refused them if they looked like
// secrets.
func redactSession(in *store.NewSession) error {
	fields := []*string{&in.Agent.Runtime, &in.Agent.RuntimeVersion, &in.Agent.Provider,
		&in.Agent.Model, &in.Agent.Instance}
	for i := range in.Capabilities {
		fields = append(fields, &in.Capabilities[i])
	}
	return redactFields(fields...)
}

func redactFields(fields ...*string) error {
	for _, f := range fields {
		red, _, err := redact.String(*f)
		if err != nil {
			return checkpointd.Invalid("", err.Error())
		}
		*f = red
	}
	return nil
}

// loadSession reads the session named in the path and checks the caller's
// scope. A malformed id cannot name a session: 404 without a query.
func (a *api) loadSession(r *http.Request) (*checkpointd.Session, error) {
	id := chi.URLParam(r, "id")
	if !checkpointd.ValidID(id) {
		return nil, fmt.Errorf("no such session: %w", checkpointd.ErrNotFound)
	}
	if err := a.settled(r.Context()); err != nil {
		return nil, err
	}
	sess, err := a.Store.Sessions.GetSession(r.Context(), id)
	if err != nil {
		return nil, err
	}
	if err := inScope(r, sess.Repo); err != nil {
		return nil, err
	}
	return sess, nil
}

// settled brings the verdicts up to date before an answer reports one
// (store.Settled): a read only reads.
func (a *api) settled(ctx context.Context) error { return a.Store.Sessions.Settled(ctx) }

func (a *api) getSession(w http.ResponseWriter, r *http.Request) error {
	sess, err := a.loadSession(r)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, sessionResponse{Session: sess})
}

type startRunRequest struct {
	Takeover bool              `json:"takeover"`
	Reason   string            `json:"reason"`
	Agent    checkpointd.Agent `json:"agent"`
	// IfRun is the conditional takeover's run ("" for none current); a
	// pointer, because "" and absent mean different things.
	IfRun *string `json:"if_run"`
}

func (a *api) startRun(w http.ResponseWriter, r *http.Request) error {
	var q startRunRequest
	if err := decode(w, r, &q); err != nil {
		return err
	}
	ps := validateAgent("/agent", q.Agent)
	if len(q.Reason) > checkpointd.MaxReasonLength {
		ps = append(ps, checkpointd.Problem{Path: "/reason", Message: fmt.Sprintf("at most %d bytes", checkpointd.MaxReasonLength)})
	}
	switch {
	case q.IfRun == nil:
	case !q.Takeover:
		ps = append(ps, checkpointd.Problem{Path: "/if_run", Message: "only with takeover: true (it makes the takeover conditional)"})
	case *q.IfRun != "" && !checkpointd.ValidID(*q.IfRun):
		ps = append(ps, checkpointd.Problem{Path: "/if_run", Message: `a run id (run_…), or "" for "only while no run is current"`})
	}
	if ps != nil {
		return &checkpointd.ValidationError{Kind: checkpointd.ErrInvalidRequest, Problems: ps}
	}
	if err := redactFields(&q.Reason, &q.Agent.Runtime, &q.Agent.RuntimeVersion, &q.Agent.Provider,
		&q.Agent.Model, &q.Agent.Instance); err != nil {
		return err
	}
	sess, err := a.loadSession(r)
	if err != nil {
		return err
	}
	started, err := a.Store.Sessions.StartRun(r.Context(), sess.ID, store.NewRun{Takeover: q.Takeover, Reason: q.Reason, Agent: q.Agent, IfRun: q.IfRun})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, map[string]any{"run": started.Run, "leases": started.Leases})
}

type endRequest struct {
	RunID   string              `json:"run_id"`
	Outcome checkpointd.Outcome `json:"outcome"`
	Reason  string              `json:"reason"`
}

// endSession ends a session for its current run (run_id), or, for an
// operator without run_id, on behalf of whatever run is current or none:
// a dead agent cannot end its own session.
func (a *api) endSession(w http.ResponseWriter, r *http.Request) error {
	var q endRequest
	if err := decode(w, r, &q); err != nil {
		return err
	}
	operator := principal(r).Role == checkpointd.RoleOperator
	var ps []checkpointd.Problem
	switch {
	case q.RunID == "" && operator:
	case !checkpointd.ValidID(q.RunID):
		msg := "required"
		if q.RunID != "" {
			msg = "not a run id"
		}
		ps = append(ps, checkpointd.Problem{Path: "/run_id", Message: msg})
	}
	if !q.Outcome.Valid() {
		ps = append(ps, checkpointd.Problem{Path: "/outcome", Message: "must be completed or abandoned"})
	}
	if len(q.Reason) > checkpointd.MaxReasonLength {
		ps = append(ps, checkpointd.Problem{Path: "/reason", Message: fmt.Sprintf("at most %d bytes", checkpointd.MaxReasonLength)})
	}
	if ps != nil {
		return &checkpointd.ValidationError{Kind: checkpointd.ErrInvalidRequest, Problems: ps}
	}
	if err := redactFields(&q.Reason); err != nil {
		return err
	}
	sess, err := a.loadSession(r)
	if err != nil {
		return err
	}
	in := store.SessionEnd{SessionID: sess.ID, RunID: q.RunID, Outcome: q.Outcome, Reason: q.Reason}
	if operator {
		by := operatorOf(r)
		in.By = &by
	}
	ended, err := a.Store.Sessions.EndSessionAs(r.Context(), in)
	if err != nil {
		return err
	}
	if operator {
		a.logAction(r, "end", slog.String("session", sess.ID), slog.String("outcome", string(q.Outcome)), slog.String("reason", q.Reason))
	}
	return writeJSON(w, http.StatusOK, sessionResponse{Session: ended})
}

func (a *api) listEvents(w http.ResponseWriter, r *http.Request) error {
	limit, c, err := page(r)
	if err != nil {
		return err
	}
	// `after` says where a listing starts, a cursor where the previous page
	// ended: both at once cannot both be obeyed, so neither is.
	q := r.URL.Query()
	if q.Has("after") && q.Has("cursor") {
		return &checkpointd.ValidationError{Kind: errConflictingQuery, Problems: []checkpointd.Problem{
			{Path: "after", Message: "not with cursor: a cursor already says where the next page starts"},
			{Path: "cursor", Message: "not with after: follow next_cursor without the first page's after"},
		}}
	}
	var after int64
	if s := q.Get("after"); s != "" {
		if after, err = strconv.ParseInt(s, 10, 64); err != nil || after < 0 {
			return checkpointd.Invalid("after", "must be a non-negative event seq")
		}
	}
	if q.Get("cursor") != "" {
		after = c.Seq
	}
	sess, err := a.loadSession(r)
	if err != nil {
		return err
	}
	items, err := a.Store.Sessions.ListEvents(r.Context(), sess.ID, after, limit)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, newList(items, limit, func(e checkpointd.Event) cursor { return cursor{Seq: e.Seq} }))
}
