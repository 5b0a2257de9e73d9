package mcp

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/client"
)

// toolDef is one tool: its name, what a model reads about
// it, its honest annotations, and its schemas (schemas.go).
type toolDef struct {
	name, title, description          string
	readOnly, destructive, idempotent bool
	input, output                     map[string]any
}

func (d toolDef) tool() *sdk.Tool {
	destructive, closed := d.destructive, false
	return &sdk.Tool{Name: d.name, Title: d.title, Description: d.description,
		InputSchema: d.input, OutputSchema: outline(d.output),
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: d.readOnly, DestructiveHint: &destructive,
			IdempotentHint: d.idempotent, OpenWorldHint: &closed}}
}

// tool is a tool's definition and its handler.
type tool struct {
	def    toolDef
	handle sdk.ToolHandler
}

// newTool is a tool whose arguments decode strictly into In. The daemon's
// API validates what they carry; a failure is a tool result with isError
// and the problem code (errors.go).
func newTool[In any](d toolDef, h func(ctx context.Context, in In) (any, error)) tool {
	return tool{def: d, handle: func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		var in In
		args := req.Params.Arguments
		if len(bytes.TrimSpace(args)) == 0 {
			args = []byte("{}")
		}
		args = coerceNumbers(args, d.input)
		dec := json.NewDecoder(bytes.NewReader(args))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			return invalidArguments(err), nil
		}
		out, err := h(ctx, in)
		if err != nil {
			return errorResult(err), nil
		}
		b, err := json.Marshal(out)
		if err != nil {
			return nil, fmt.Errorf("encoding the answer of %s: %w", d.name, err)
		}
		return &sdk.CallToolResult{StructuredContent: json.RawMessage(b), Content: []sdk.Content{&sdk.TextContent{Text: string(b)}}}, nil
	}}
}

type sessionStartIn struct {
	client.CreateSessionRequest
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

type sessionResumeIn struct {
	SessionID string             `json:"session_id"`
	RunID     string             `json:"run_id,omitempty"`
	Takeover  bool               `json:"takeover,omitempty"`
	IfRun     *string            `json:"if_run,omitempty"`
	Reason    string             `json:"reason,omitempty"`
	Agent     *checkpointd.Agent `json:"agent,omitempty"`
}

// takenOver is session_resume's answer after a takeover: the verdict, and
// the leases the new run holds with their new fencing tokens (the verdict
// carries the new run).
type takenOver struct {
	*client.Resume
	Leases []checkpointd.Lease `json:"leases"`
}

type checkpointWriteIn struct {
	SessionID      string          `json:"session_id"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	Checkpoint     json.RawMessage `json:"checkpoint"`
}

type leaseRenewIn struct {
	LeaseID    string `json:"lease_id"`
	RunID      string `json:"run_id"`
	TTLSeconds int64  `json:"ttl_seconds,omitempty"`
}

type leaseReleaseIn struct {
	LeaseID string `json:"lease_id"`
	RunID   string `json:"run_id"`
}

type heartbeatIn struct {
	SessionID string `json:"session_id"`
	RunID     string `json:"run_id"`
}

type sessionEndIn struct {
	SessionID string `json:"session_id"`
	client.EndRequest
}

type sessionFindIn struct {
	Repo      string `json:"repo,omitempty"`
	Issue     int64  `json:"issue,omitempty"`
	PR        int64  `json:"pr,omitempty"`
	Branch    string `json:"branch,omitempty"`
	WaitingOn string `json:"waiting_on,omitempty"`
	State     string `json:"state,omitempty"`
	Limit     int    `json:"limit,omitempty"`
	Cursor    string `json:"cursor,omitempty"`
}

// foundSession is what session_find says of a session: enough to tell it
// is yours (repo, target, role) or waits on you, and to claim it (the
// current run for if_run), without the whole summary.
type foundSession struct {
	ID        string                   `json:"id"`
	Repo      string                   `json:"repo"`
	Role      string                   `json:"role"`
	Issue     int64                    `json:"issue,omitempty"`
	PR        int64                    `json:"pr,omitempty"`
	Branch    string                   `json:"branch,omitempty"`
	State     checkpointd.SessionState `json:"state"`
	Parked    bool                     `json:"parked,omitempty"`
	RunID     string                   `json:"run_id"`
	Live      *bool                    `json:"live,omitempty"`
	Validity  checkpointd.Validity     `json:"validity"`
	Stage     string                   `json:"stage,omitempty"`
	WaitingOn string                   `json:"waiting_on,omitempty"`
	NextActor string                   `json:"next_actor,omitempty"`
}

// foundSchema is foundSession's.
var foundSchema = map[string]any{"type": "object", "additionalProperties": false,
	"required": []any{"id", "repo", "role", "state", "run_id", "validity"},
	"properties": map[string]any{
		"id": map[string]any{"type": "string"}, "repo": map[string]any{"type": "string"}, "role": map[string]any{"type": "string"},
		"issue": map[string]any{"type": "integer"}, "pr": map[string]any{"type": "integer"}, "branch": map[string]any{"type": "string"},
		"state": map[string]any{"enum": []any{"active", "ended"}}, "parked": map[string]any{"type": "boolean"},
		"run_id": map[string]any{"type": "string"}, "live": map[string]any{"type": "boolean"},
		"validity": map[string]any{"enum": []any{"valid", "stale", "lease_lost", "invalidated", "unverified"}},
		"stage":    map[string]any{"type": "string"}, "waiting_on": map[string]any{"type": "string"}, "next_actor": map[string]any{"type": "string"}}}

func found(s *checkpointd.Session) foundSession {
	f := foundSession{ID: s.ID, Repo: s.Repo, Role: s.Role, Issue: s.Issue, PR: s.PR, Branch: s.Branch,
		State: s.State, Parked: s.Parked, Validity: s.Validity}
	if s.CurrentRun != nil {
		f.RunID, f.Live = s.CurrentRun.ID, s.CurrentRun.Live
	}
	if s.Latest != nil {
		f.Stage, f.WaitingOn, f.NextActor = s.Latest.Stage, s.Latest.WaitingOn, s.Latest.NextActor
	}
	return f
}

type drainStatusIn struct {
	Limit int `json:"limit,omitempty"`
}

// addTools registers the tools over c.
func addTools(s *sdk.Server, c *client.Client, wf checkpointd.Workflow, onSession func(*checkpointd.Session)) {
	for _, t := range tools(c, wf, onSession) {
		s.AddTool(t.def.tool(), t.handle)
	}
}

// tools are the tools over c, naming wf's roles and stages; onSession
// hears of every session a tool answers about.
func tools(c *client.Client, wf checkpointd.Workflow, onSession func(*checkpointd.Session)) []tool {
	var ts []tool
	id := func(desc string) map[string]any {
		return map[string]any{"type": "string", "pattern": "^[a-z]{3}_[0-9a-f]{32}$", "description": desc}
	}
	b := newBundle()
	ts = append(ts, newTool(toolDef{name: "session_start", title: "Start a session",
		description: "Create a durable session for one piece of work on a Gitea/Forgejo repository (an issue, a PR or a branch) and its first run. " +
			"Keep session.id, run.id and run.fencing_token: later calls need them. " +
			"Give an idempotency_key naming the task (e.g. \"acme/widgets#12 author\"): after a crash or restart the same key for the same repo, target and role returns that session (whatever agent says), not a second one; then call session_resume. " +
			"Refused with draining while the daemon drains before a deploy.",
		input: b.objectOf(b.requestSchema("POST", "/v1/sessions"),
			map[string]any{"idempotency_key": map[string]any{"type": "string", "maxLength": 255,
				"description": "names the task: the same key for the same repo, target and role answers the session it created"},
				"role": enumOf(wf.Roles, "your role in the session")}),
		output: asObject(newBundle(), "POST", "/v1/sessions", "201")},
		func(ctx context.Context, in sessionStartIn) (any, error) {
			out, err := c.Sessions().Create(ctx, &in.CreateSessionRequest, &client.WriteOptions{IdempotencyKey: in.IdempotencyKey})
			if err == nil && onSession != nil {
				onSession(out.Session)
			}
			return out, err
		}))

	b = newBundle()
	ts = append(ts, newTool(toolDef{name: "session_resume", title: "Resume a session",
		description: "Read the verdict on a session's latest checkpoint before acting on a session you did not just create (after a restart or crash, or when told it changed). " +
			"Continue from it only when resumable is true; otherwise act on each explanation: stale: the branch moved (fetch, re-check); lease_lost: re-acquire leases; " +
			"unverified: no evidence yet (verify the branch yourself); invalidated: the PR or branch is gone (end the session). " +
			"A pending_mutation comes with the forge's answer: done (do not redo it), not_done (do it, same idempotency key), unknown (check by its key first). " +
			"takeover true (with a reason) starts your run, superseding the current one: only when that run is really gone. The answer then carries your run (id, fencing_token) and leases with their new fencing tokens: name those in your next checkpoint. " +
			"To claim a handoff others may claim too, pass if_run: the run_id session_find showed (\"\" if parked); run_changed means another claimant won: leave it.",
		input: b.objectOf(nil, map[string]any{
			"session_id": id("the session"),
			"run_id":     id("your run, if you are its current run: counts as a sign of life"),
			"takeover":   map[string]any{"type": "boolean", "description": "start a new run that supersedes the current one"},
			"if_run": map[string]any{"type": "string", "pattern": "^(run_[0-9a-f]{32})?$",
				"description": "with takeover: only if this run is still current (\"\": only if none is); else run_changed"},
			"reason": map[string]any{"type": "string", "maxLength": 1024, "description": "why you take over (recorded)"},
			"agent":  b.refTo("Agent")}, "session_id"),
		output: withLeases(asObject(newBundle(), "GET", "/v1/sessions/{id}/resume", "200"))},
		func(ctx context.Context, in sessionResumeIn) (any, error) {
			runID := in.RunID
			if in.Takeover {
				var agent checkpointd.Agent
				if in.Agent != nil {
					agent = *in.Agent
				}
				taken, err := c.Sessions().StartRun(ctx, in.SessionID,
					&client.StartRunRequest{Takeover: true, IfRun: in.IfRun, Reason: in.Reason, Agent: agent})
				if err != nil {
					return nil, err
				}
				v, err := c.Sessions().Resume(ctx, in.SessionID, taken.Run.ID)
				if err != nil {
					// The takeover happened: the new run and its leases
					// are the caller's whatever the read says, so they
					// must not be lost.
					return nil, &takeoverError{taken: taken, err: err}
				}
				return takenOver{Resume: v, Leases: taken.Leases}, nil
			}
			return c.Sessions().Resume(ctx, in.SessionID, runID)
		}))

	b = newBundle()
	ts = append(ts, newTool(toolDef{name: "checkpoint_write", title: "Write a checkpoint", idempotent: true,
		description: "Record your work's durable state as an immutable checkpoint: on every stage transition, before a forge mutation (in pending_mutation with its idempotency key; put <!-- checkpointd:KEY --> in the comment or review you post), after it, and at once when a drain starts. " +
			"Fill stage, target, workspace (branch, head), leases, last_completed_action, next_action, evidence, blocker and recovery so a new run can continue without you. " +
			"Secrets are redacted. The answer says whether it is complete (missing: what a resume would lack) and its validity. " +
			"The same idempotency_key never writes twice. run_superseded: another run took over; stop.",
		input: withWorkflow(b.objectOf(nil, map[string]any{
			"session_id":      id("the session"),
			"idempotency_key": map[string]any{"type": "string", "maxLength": 255, "description": "one key per checkpoint: a retry with it is a replay"},
			"checkpoint":      b.refTo(checkpointDef)}, "session_id", "checkpoint"), wf),
		output: asObject(newBundle(), "POST", "/v1/sessions/{id}/checkpoints", "201")},
		func(ctx context.Context, in checkpointWriteIn) (any, error) {
			if len(in.Checkpoint) == 0 {
				return nil, &client.Error{Status: 422, Code: "invalid_request", Detail: "checkpoint: required"}
			}
			return c.Checkpoints().WriteRaw(ctx, in.SessionID, in.Checkpoint, &client.WriteOptions{IdempotencyKey: in.IdempotencyKey})
		}))

	b = newBundle()
	ts = append(ts, newTool(toolDef{name: "lease_acquire", title: "Acquire a lease",
		description: "Claim exclusive use of an issue, a pull request or a branch for a time (ttl_seconds, 10 s to 24 h) before you change it, so no other agent works on it at once. " +
			"Refused with lease_held (extra.holder names who has it): then do not touch the resource. Renew before it expires; name the lease in your checkpoints.",
		input: b.objectOf(b.requestSchema("POST", "/v1/leases"),
			map[string]any{"session_id": id("your session"), "run_id": id("your run, the holder")}),
		output: asObject(newBundle(), "POST", "/v1/leases", "201")},
		func(ctx context.Context, in client.AcquireRequest) (any, error) {
			l, err := c.Leases().Acquire(ctx, &in)
			return map[string]any{"lease": l}, err
		}))

	b = newBundle()
	ts = append(ts, newTool(toolDef{name: "lease_renew", title: "Renew a lease",
		description: "Extend a lease you hold, well before its expires_at (e.g. at half its term). Refused with lease_lost when it expired or moved: stop changing the resource and acquire it again.",
		input: b.objectOf(b.requestSchema("POST", "/v1/leases/{id}/renew"),
			map[string]any{"lease_id": id("the lease"), "run_id": id("your run, the holder")}, "lease_id"),
		output: asObject(newBundle(), "POST", "/v1/leases/{id}/renew", "200")},
		func(ctx context.Context, in leaseRenewIn) (any, error) {
			l, err := c.Leases().Renew(ctx, in.LeaseID, in.RunID, in.TTLSeconds)
			return map[string]any{"lease": l}, err
		}))

	ts = append(ts, newTool(toolDef{name: "lease_release", title: "Release a lease", destructive: true,
		description: "Give up a lease you hold when you are done with the resource, so others may take it. It cannot be undone: acquire again (with a new fencing token) if you need it back.",
		input: map[string]any{"type": "object", "additionalProperties": false, "required": []any{"lease_id", "run_id"},
			"properties": map[string]any{"lease_id": id("the lease"), "run_id": id("your run, the holder")}},
		output: map[string]any{"type": "object", "required": []any{"released", "lease_id"},
			"properties": map[string]any{"released": map[string]any{"const": true}, "lease_id": id("the released lease")}}},
		func(ctx context.Context, in leaseReleaseIn) (any, error) {
			if err := c.Leases().Release(ctx, in.LeaseID, in.RunID); err != nil {
				return nil, err
			}
			return map[string]any{"released": true, "lease_id": in.LeaseID}, nil
		}))

	b = newBundle()
	ts = append(ts, newTool(toolDef{name: "heartbeat", title: "Heartbeat", idempotent: true,
		description: "Tell the daemon your run is alive while you think or wait without writing (every few minutes). Any other call of your run counts too. " +
			"Refused with run_superseded when another run took over or an operator parked the session: stop working then.",
		input: b.objectOf(b.requestSchema("POST", "/v1/sessions/{id}/heartbeat"),
			map[string]any{"session_id": id("the session"), "run_id": id("your run")}, "session_id"),
		output: asObject(newBundle(), "POST", "/v1/sessions/{id}/heartbeat", "200")},
		func(ctx context.Context, in heartbeatIn) (any, error) {
			run, err := c.Sessions().Heartbeat(ctx, in.SessionID, in.RunID)
			if err != nil {
				return nil, err
			}
			// The answer's run carries only these.
			return map[string]any{"run": map[string]any{"id": run.ID, "last_seen_at": run.LastSeenAt, "live": run.Live}}, nil
		}))

	b = newBundle()
	ts = append(ts, newTool(toolDef{name: "session_end", title: "End a session", destructive: true,
		description: "End the session when the work is done (outcome completed) or given up (abandoned), with a reason. It releases every lease of the session and cannot be undone. Write a final checkpoint first.",
		input: b.objectOf(b.requestSchema("POST", "/v1/sessions/{id}/end"),
			map[string]any{"session_id": id("the session")}, "session_id", "run_id"),
		output: asObject(newBundle(), "POST", "/v1/sessions/{id}/end", "200")},
		func(ctx context.Context, in sessionEndIn) (any, error) {
			sess, err := c.Sessions().End(ctx, in.SessionID, &in.EndRequest)
			return map[string]any{"session": sess}, err
		}))

	ts = append(ts, newTool(toolDef{name: "session_find", title: "Find sessions", readOnly: true, idempotent: true,
		description: "Find sessions in your scope, newest first: after a restart, the one you were working on (repo with issue, pr or branch); " +
			"or the work waiting on your role (waiting_on). Each item says who holds it (run_id, \"\" when parked) and its state of play; " +
			"then call session_resume, with takeover and if_run set to that run_id to claim a handoff others may claim too.",
		input: map[string]any{"type": "object", "additionalProperties": false, "properties": map[string]any{
			"repo":       map[string]any{"type": "string", "description": "owner/name, or owner/* for every repo of an owner"},
			"issue":      map[string]any{"type": "integer", "minimum": 1, "description": "the issue the session works on (needs repo as owner/name)"},
			"pr":         map[string]any{"type": "integer", "minimum": 1, "description": "the pull request the session works on (needs repo as owner/name)"},
			"branch":     map[string]any{"type": "string", "description": "the branch the session is bound to"},
			"waiting_on": map[string]any{"type": "string", "description": "who the latest checkpoint's blocker waits on, e.g. a role"},
			"state":      map[string]any{"type": "string", "enum": []any{"active", "ended", "any"}, "description": "default active"},
			"limit":      map[string]any{"type": "integer", "minimum": 1, "maximum": 100, "description": "default 20"},
			"cursor":     map[string]any{"type": "string", "description": "the previous answer's next_cursor, for the next page"}}},
		output: map[string]any{"type": "object", "required": []any{"items", "next_cursor"}, "properties": map[string]any{
			"items": map[string]any{"type": "array", "items": foundSchema}, "next_cursor": map[string]any{"type": "string"}}}},
		func(ctx context.Context, in sessionFindIn) (any, error) {
			state := checkpointd.SessionActive
			switch in.State {
			case "", "active":
			case "any":
				state = ""
			default:
				state = checkpointd.SessionState(in.State)
			}
			page, err := c.Sessions().List(ctx, client.SessionListOptions{State: state, Repo: in.Repo, Issue: in.Issue, PR: in.PR,
				Branch: in.Branch, WaitingOn: in.WaitingOn, ListOptions: client.ListOptions{Limit: cmp.Or(in.Limit, 20), Cursor: in.Cursor}})
			if err != nil {
				return nil, err
			}
			items := make([]foundSession, len(page.Items))
			for i := range page.Items {
				items[i] = found(&page.Items[i])
				if onSession != nil {
					onSession(&page.Items[i])
				}
			}
			return map[string]any{"items": items, "next_cursor": page.NextCursor}, nil
		}))

	ts = append(ts, newTool(toolDef{name: "drain_status", title: "Drain status", readOnly: true, idempotent: true,
		description: "Whether the daemon is draining before a deploy, and which sessions still block it and why. When draining is true: write a complete checkpoint of your current state now, and start no new work.",
		input: map[string]any{"type": "object", "additionalProperties": false,
			"properties": map[string]any{"limit": map[string]any{"type": "integer", "minimum": 1, "maximum": 500,
				"description": "how many blocking sessions to list (default 50)"}}},
		output: asObject(newBundle(), "GET", "/v1/drain", "200")},
		func(ctx context.Context, in drainStatusIn) (any, error) {
			return c.Drain().Status(ctx, client.ListOptions{Limit: in.Limit})
		}))
	return ts
}

// asObject is an answer's schema, inlined when it names a component (a
// tool's output schema must be an object schema, not a reference).
func asObject(b *bundle, method, path, status string) map[string]any {
	s := b.inline(b.responseSchema(method, path, status))
	return b.schema(s)
}

// withLeases is the resume verdict's schema with the leases a takeover
// hands back (takenOver).
func withLeases(resume map[string]any) map[string]any {
	b := newBundle()
	props := maps.Clone(resume["properties"].(map[string]any))
	props["leases"] = map[string]any{"type": "array", "items": b.refTo("Lease"),
		"description": "after a takeover: the leases your new run holds, with their new fencing tokens"}
	defs, _ := resume["$defs"].(map[string]any)
	defs = maps.Clone(defs)
	if defs == nil {
		defs = map[string]any{}
	}
	maps.Copy(defs, b.defs)
	out := maps.Clone(resume)
	out["properties"], out["$defs"] = props, defs
	return out
}
