// Package mcp is checkpointd's Model Context Protocol server,
// built on the official Go SDK: the tools session_start, session_resume,
// checkpoint_write, lease_acquire, lease_renew, lease_release, heartbeat,
// session_end, drain_status and session_find; the checkpoint schema and each in-scope
// session as resources; and subscriptions to a session, notified from the
// change feed when its validity, leases or run change.
//
// Every tool calls the daemon's HTTP API through the Go client (package
// client) with the caller's token: in the daemon over an in-process
// transport (Handler), in `checkpointd mcp` over the network (the stdio
// bridge). So a tool checks, validates, redacts and records exactly what
// the same REST call does.
package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/client"
)

// Resource URIs.
const (
	SchemaURI     = "checkpointd://schema/checkpoint/v1"
	sessionPrefix = "checkpointd://sessions/"
)

// SessionURI is the resource of a session.
func SessionURI(id string) string { return sessionPrefix + id }

// Options configure a server.
type Options struct {
	// Version is reported to clients (the daemon's version).
	Version string
	// Workflow is the daemon's configured roles and stages: the input
	// schemas name them as enums, so a model knows them before its first
	// call. The zero Workflow names none.
	Workflow checkpointd.Workflow
	// NoFeed leaves subscriptions unnotified (a daemon without the change
	// feed); by default the server follows GET /v1/watch with its token.
	NoFeed bool
	// ListSessions bounds how many in-scope active sessions resources/list
	// shows (default 100); the template reads any other.
	ListSessions int
	// CallTimeout bounds each tool call and resource read, retries
	// included (0: none but the caller's). A daemon that hangs then
	// answers the model "unreachable" instead of holding the call.
	CallTimeout time.Duration
}

// instructions tell a model how the tools fit together.
const instructions = "checkpointd keeps your work durable on Gitea/Forgejo. " +
	"Start with session_start (new work) or session_resume (existing session: never continue from a checkpoint that is not resumable without checking); session_find finds your session after a restart, or the work waiting on your role. " +
	"Hold leases on what you change (lease_acquire/lease_renew). Write a checkpoint (checkpoint_write) on every stage transition and before any forge mutation. " +
	"Send heartbeat while you think without writing. When a call answers run_superseded, stop: another run owns the session. " +
	"When drain_status says draining, write a complete checkpoint and stop. Subscribe to checkpointd://sessions/{id} to hear at once when your checkpoint goes stale."

// New returns an MCP server whose tools and resources act through c.
func New(c *client.Client, opts Options) *sdk.Server {
	if opts.ListSessions <= 0 {
		opts.ListSessions = 100
	}
	r := &resources{c: c, opts: opts}
	s := sdk.NewServer(&sdk.Implementation{Name: "checkpointd", Title: "checkpointd", Version: opts.Version},
		&sdk.ServerOptions{Instructions: instructions, SubscribeHandler: r.subscribe, UnsubscribeHandler: r.unsubscribe,
			InitializedHandler: r.initialized})
	r.server = s
	schema := opts.Workflow.CheckpointSchema()
	addTools(s, c, opts.Workflow, r.add)
	s.AddResource(&sdk.Resource{URI: SchemaURI, Name: "checkpoint-schema-v1", Title: "The checkpoint document's JSON Schema (v1)",
		MIMEType: "application/schema+json", Description: "What checkpoint_write's checkpoint must be."},
		func(context.Context, *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
			return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: SchemaURI, MIMEType: "application/schema+json",
				Text: string(schema)}}}, nil
		})
	s.AddResourceTemplate(&sdk.ResourceTemplate{URITemplate: sessionPrefix + "{id}", Name: "session", Title: "A session",
		MIMEType: "application/json", Description: "A session in the token's scope: its summary and validity, and its latest checkpoint. Subscribe to hear when it changes."},
		r.read)
	if opts.CallTimeout > 0 {
		s.AddReceivingMiddleware(callTimeout(opts.CallTimeout))
	}
	return s
}

// callTimeout bounds the requests that call the daemon: a tool call or a
// resource read past d ends with its context, which the tools answer as
// "unreachable" (the call may or may not have taken effect).
func callTimeout(d time.Duration) sdk.Middleware {
	return func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			switch method {
			case "tools/call", "resources/read", "resources/list":
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, d)
				defer cancel()
			}
			return next(ctx, method, req)
		}
	}
}

// resources serves the sessions as resources and feeds subscriptions.
type resources struct {
	c      *client.Client
	opts   Options
	server *sdk.Server

	mu       sync.Mutex
	listed   map[string]bool
	watching bool
	stop     context.Context
}

// initialized lists the in-scope active sessions as resources, and keeps
// the MCP session's lifetime for the feed.
func (r *resources) initialized(ctx context.Context, req *sdk.InitializedRequest) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() { _ = req.Session.Wait(); cancel() }()
	r.mu.Lock()
	r.stop = ctx
	r.mu.Unlock()
	page, err := r.c.Sessions().List(ctx, client.SessionListOptions{State: checkpointd.SessionActive,
		ListOptions: client.ListOptions{Limit: r.opts.ListSessions}})
	if err != nil {
		return // the template still reads every session
	}
	for i := range page.Items {
		r.add(&page.Items[i])
	}
}

// add lists a session as a resource (once), named by its repo and target
// so a model can tell its sessions apart in resources/list.
func (r *resources) add(sess *checkpointd.Session) {
	id := sess.ID
	r.mu.Lock()
	if r.listed == nil {
		r.listed = map[string]bool{}
	}
	if r.listed[id] {
		r.mu.Unlock()
		return
	}
	r.listed[id] = true
	r.mu.Unlock()
	name := sess.Repo + " " + sess.TargetText()
	r.server.AddResource(&sdk.Resource{URI: SessionURI(id), Name: name, Title: name + " (" + sess.Role + ")", MIMEType: "application/json",
		Description: fmt.Sprintf("session %s: %s, %s, role %s; its validity and latest checkpoint", id, sess.Repo, sess.TargetText(), sess.Role)}, r.read)
}

// sessionResource is what reading a session's resource returns.
type sessionResource struct {
	Session *checkpointd.Session    `json:"session"`
	Latest  *checkpointd.Checkpoint `json:"latest_checkpoint"`
}

func (r *resources) read(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
	uri := req.Params.URI
	id, ok := strings.CutPrefix(uri, sessionPrefix)
	if !ok || !checkpointd.ValidID(id) {
		return nil, sdk.ResourceNotFoundError(uri)
	}
	sess, err := r.c.Sessions().Get(ctx, id)
	if err != nil {
		if p, ok := err.(*client.Error); ok && (p.Code == "not_found" || p.Code == "forbidden" || p.Code == "gone") {
			return nil, sdk.ResourceNotFoundError(uri)
		}
		return nil, err
	}
	out := sessionResource{Session: sess}
	if sess.Latest != nil {
		if out.Latest, err = r.c.Checkpoints().Latest(ctx, id); err != nil {
			return nil, err
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: uri, MIMEType: "application/json", Text: string(b)}}}, nil
}

// subscribe accepts a subscription to any resource (the SDK keeps who
// subscribed to what) and starts following the change feed.
func (r *resources) subscribe(ctx context.Context, req *sdk.SubscribeRequest) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.watching || r.opts.NoFeed {
		return nil
	}
	r.watching = true
	stop := r.stop
	if stop == nil {
		// Subscribed before initialized: follow for as long as this MCP
		// session lives, never longer.
		var cancel context.CancelFunc
		stop, cancel = context.WithCancel(context.Background())
		go func() { _ = req.Session.Wait(); cancel() }()
	}
	go r.follow(stop)
	return nil
}

func (r *resources) unsubscribe(context.Context, *sdk.UnsubscribeRequest) error { return nil }

// follow notifies subscribers of each change until stop ends: the
// session an event names, or, after a reset (the feed could not resume,
// so anything may have changed), every session listed.
func (r *resources) follow(stop context.Context) {
	notify := func(id string) {
		_ = r.server.ResourceUpdated(stop, &sdk.ResourceUpdatedNotificationParams{URI: SessionURI(id)})
	}
	for stop.Err() == nil {
		for ev, err := range r.c.Watch(stop, client.WatchOptions{}) {
			if err != nil {
				break // refused (revoked token, …): try again after a pause
			}
			if id := ev.SessionID(); id != "" {
				notify(id)
			} else if ev.Type == "reset" {
				r.mu.Lock()
				ids := slices.Collect(maps.Keys(r.listed))
				r.mu.Unlock()
				for _, id := range ids {
					notify(id)
				}
			}
		}
		select {
		case <-stop.Done():
		case <-time.After(5 * time.Second):
		}
	}
}
