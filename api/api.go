// Package api serves the checkpointd HTTP API v1: JSON in and
// out, RFC 9457 problems with a stable code, bearer-token access control.
package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/drain"
	"github.com/checkpointd/checkpointd/errlog"
	"github.com/checkpointd/checkpointd/lease"
	"github.com/checkpointd/checkpointd/metrics"
	"github.com/checkpointd/checkpointd/reconcile"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/writefail"
)

// Stores is what the API needs of persistence: one small interface per
// part of it, each declared beside the handlers that use it. StoresOf
// takes them all from one store; a test may put a wrapper of it in any.
type Stores struct {
	Auth        authStore        // auth.go
	Tokens      tokenStore       // tokens.go
	Sessions    sessionStore     // sessions.go
	Checkpoints checkpointStore  // checkpoints.go
	Idempotency idempotencyStore // idempotency.go
	Leases      leaseStore       // leases.go
	Drain       drain.Store      // drain.go (the drain gate, package drain)
	Failures    writefail.Store  // the failure journal (Deps.Failures) by default
	Feed        FeedStore        // watch_hub.go
	Errors      errorStore       // errorlog.go
	Reconcile   reconcileStore   // reconcile.go
	Ready       readyStore       // readyz, below
}

// StoresOf takes every store of the API from s.
func StoresOf(s *store.Store) Stores {
	return Stores{Auth: s, Tokens: s, Sessions: s, Checkpoints: s, Idempotency: s, Leases: s, Drain: s, Failures: s,
		Feed: s, Errors: s, Reconcile: s, Ready: s}
}

// readyStore is what readyz asks.
type readyStore interface {
	Ready(ctx context.Context) error
	ReadyWarnings(ctx context.Context) []string
}

// Deps are the API's collaborators and settings.
type Deps struct {
	Store Stores
	// Leases defaults to a manager over Store; serve passes the one whose
	// worker it runs.
	Leases *lease.Manager
	// Webhook serves POST /webhooks/gitea, authenticated by HMAC signature
	// instead of a token; nil leaves the route unserved.
	Webhook  http.Handler
	Workflow checkpointd.Workflow
	// DigestKey keys the idempotency digest of checkpoint documents.
	DigestKey []byte
	// MaxDocumentBytes caps a checkpoint document (default 256 KiB).
	MaxDocumentBytes int64
	Logger           *slog.Logger
	// Reconciler serves POST /v1/reconcile; it defaults to one over Store
	// with no forge (its passes report "forge not configured").
	Reconciler Reconciler
	// Verifier, when set, re-checks the sessions blocked only by unverified
	// before the drain gate decides, for at most VerifyTimeout (default
	// 10s). Nil skips the step.
	Verifier      Verifier
	VerifyTimeout time.Duration
	// Mutations asks the forge whether a resumed checkpoint's pending
	// mutation happened; nil answers unknown, "forge not
	// configured".
	Mutations MutationResolver
	// Evidence says which sources of live-head evidence are configured;
	// drain answers say what unblocks a session accordingly, and say so
	// plainly when there is none.
	Evidence checkpointd.EvidenceSources
	// OnDrainDecision, when set, is told every decision of the drain gate
	// (e.g. to count it in a metric).
	OnDrainDecision func(checkpointd.DrainOutcome)
	// DrainHeaderTTL is how long the Checkpointd-Drain header may lag the
	// drain state (default 1s; negative: read the store every request).
	DrainHeaderTTL time.Duration
	// Metrics counts requests, checkpoint writes and reads, idempotent
	// replays and the drain; nil counts nothing.
	Metrics *metrics.Metrics
	// MetricsHandler, when set, serves GET /metrics on this router (serve
	// sets it unless --metrics-listen moves the metrics elsewhere).
	MetricsHandler http.Handler
	// Errors records failed checkpoint writes durably; it defaults to a
	// recorder over Store.
	Errors *errlog.Recorder
	// Failures keeps the failed checkpoint writes the store could not
	// record, and answers the drain gate's confirmation requests
	// (writefail). serve gives the replica's journal; nil keeps one in
	// memory only, for tests and embedding.
	Failures *writefail.Journal
	// DrainConfirmTimeout bounds how long a completion waits for every
	// replica to confirm (default writefail.DefaultConfirmTimeout).
	DrainConfirmTimeout time.Duration
	// WatchStop, when closed, ends every GET /v1/watch stream: serve closes
	// it as the server shuts down, which would otherwise wait for streams
	// that never go idle.
	WatchStop <-chan struct{}
	// WatchKeepAlive, WatchBacklog, WatchBuffer and WatchWriteTimeout tune
	// the change feed (defaults DefaultWatch…; docs/watch.md). A negative
	// WatchBacklog bounds a resume only by the event log's retention.
	WatchKeepAlive    time.Duration
	WatchBacklog      time.Duration
	WatchBuffer       int
	WatchWriteTimeout time.Duration
	// WatchMemory, WatchStreams and WatchStreamsPerToken bound what the
	// streams may hold and how many may be open (defaults DefaultWatch…).
	WatchMemory          int64
	WatchStreams         int
	WatchStreamsPerToken int
}

type api struct {
	Deps
	// checkpointSchema is the schema served, with the workflow's enums.
	checkpointSchema []byte
	log              *slog.Logger
	gate             *drain.Gate
	// hub reads the change feed once for every watcher (watch_hub.go).
	hub                               *feedHub
	watchStop                         <-chan struct{}
	watchKeepAlive, watchWriteTimeout time.Duration
	watchBacklog                      time.Duration
	watchBuffer                       int
}

// New returns the HTTP handler of the whole API.
func New(d Deps) http.Handler {
	if d.MaxDocumentBytes <= 0 {
		d.MaxDocumentBytes = checkpointd.DefaultMaxDocumentBytes
	}
	a := &api{Deps: d, log: d.Logger, checkpointSchema: d.Workflow.CheckpointSchema()}
	if a.Failures == nil {
		j, err := writefail.Open("", d.Store.Failures, d.Logger, 0)
		if err != nil {
			panic(err) // a journal in memory opens no file
		}
		a.Failures = j
	}
	if a.Leases == nil {
		a.Leases = lease.NewManager(d.Store.Leases, d.Logger)
	}
	if a.Reconciler == nil {
		a.Reconciler = &reconcile.Reconciler{Store: d.Store.Reconcile, Log: d.Logger}
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	a.log = slog.New(LogHandler(a.log.Handler()))
	a.initWatch()
	if a.Errors == nil {
		a.Errors = errlog.New(d.Store.Errors, a.log, d.Metrics)
	}
	a.gate = &drain.Gate{Store: d.Store.Drain, Verifier: d.Verifier, VerifyTimeout: d.VerifyTimeout, Failures: a.Failures,
		ConfirmTimeout: d.DrainConfirmTimeout, Errors: a.Errors, HeaderTTL: d.DrainHeaderTTL, Log: a.log}
	r := chi.NewRouter()
	// HEAD is served on every GET route as GET (net/http drops the body);
	// a 405 says which methods the route serves.
	r.Use(requestID, a.observe, a.recoverer, a.drainHeader, headAsGet)
	r.NotFound(a.handle(func(http.ResponseWriter, *http.Request) error { return checkpointd.ErrNotFound }))
	allow := &allowTable{}
	r.MethodNotAllowed(a.handle(func(w http.ResponseWriter, req *http.Request) error {
		w.Header().Set("Allow", allow.methods(req))
		return errMethodNotAllowed
	}))

	r.Get("/healthz", a.healthz)
	r.Get("/readyz", a.handle(a.readyz))
	r.Get("/v1/schema/checkpoint", a.handle(a.schema))
	r.Get("/v1/openapi.yaml", a.openapi)
	if d.Webhook != nil {
		// POST only: the router answers other methods 405, as on every route.
		r.Post("/webhooks/gitea", d.Webhook.ServeHTTP)
	}
	if d.MetricsHandler != nil {
		r.Method(http.MethodGet, "/metrics", d.MetricsHandler)
	}

	r.Group(func(r chi.Router) {
		r.Use(a.authenticate)
		r.With(a.require(checkpointd.RoleAgent)).Post("/v1/sessions", a.handle(a.createSession))
		r.With(a.require(checkpointd.RoleReader)).Get("/v1/sessions", a.handle(a.listSessions))
		r.With(a.require(checkpointd.RoleReader)).Get("/v1/fleet", a.handle(a.fleet))
		r.Route("/v1/sessions/{id}", func(r chi.Router) {
			r.With(a.require(checkpointd.RoleReader)).Get("/", a.handle(a.getSession))
			r.With(a.require(checkpointd.RoleOperator)).Delete("/", a.handle(a.clearSession))
			r.With(a.require(checkpointd.RoleAgent)).Post("/runs", a.handle(a.startRun))
			r.With(a.require(checkpointd.RoleAgent)).Post("/checkpoints", a.handle(a.writeCheckpoint))
			r.With(a.require(checkpointd.RoleReader)).Get("/checkpoints", a.handle(a.listCheckpoints))
			r.With(a.require(checkpointd.RoleReader)).Get("/checkpoints/{seq}", a.handle(a.getCheckpoint))
			r.With(a.require(checkpointd.RoleAgent)).Get("/resume", a.handle(a.resume))
			r.With(a.require(checkpointd.RoleAgent)).Post("/end", a.handle(a.endSession))
			r.With(a.require(checkpointd.RoleAgent)).Post("/heartbeat", a.handle(a.heartbeat))
			r.With(a.require(checkpointd.RoleOperator)).Post("/park", a.handle(a.parkSession))
			r.With(a.require(checkpointd.RoleReader)).Get("/events", a.handle(a.listEvents))
		})
		r.With(a.require(checkpointd.RoleAgent)).Post("/v1/leases", a.handle(a.acquireLease))
		r.With(a.require(checkpointd.RoleReader)).Get("/v1/leases", a.handle(a.listLeases))
		r.With(a.require(checkpointd.RoleAgent)).Post("/v1/leases/{id}/renew", a.handle(a.renewLease))
		r.With(a.require(checkpointd.RoleAgent)).Delete("/v1/leases/{id}", a.handle(a.releaseLease))
		r.With(a.require(checkpointd.RoleOperator)).Post("/v1/tokens", a.handle(a.createToken))
		r.With(a.require(checkpointd.RoleOperator)).Get("/v1/tokens", a.handle(a.listTokens))
		r.With(a.require(checkpointd.RoleOperator)).Delete("/v1/tokens/{id}", a.handle(a.revokeToken))
		r.With(a.require(checkpointd.RoleOperator)).Post("/v1/reconcile", a.handle(a.reconcileNow))
		r.With(a.require(checkpointd.RoleReader)).Get("/v1/reconcile/last", a.handle(a.lastReconcile))
		r.With(a.require(checkpointd.RoleOperator)).Post("/v1/drain", a.handle(a.startDrain))
		r.With(a.require(checkpointd.RoleReader)).Get("/v1/drain", a.handle(a.getDrain))
		r.With(a.require(checkpointd.RoleReader)).Get("/v1/drains", a.handle(a.listDrains))
		r.With(a.require(checkpointd.RoleOperator)).Post("/v1/drain/complete", a.handle(a.completeDrain))
		r.With(a.require(checkpointd.RoleOperator)).Post("/v1/drain/cancel", a.handle(a.cancelDrain))
		r.With(a.require(checkpointd.RoleReader)).Get("/v1/errors", a.handle(a.listErrors))
		r.With(a.require(checkpointd.RoleReader)).Get("/v1/watch", a.handle(a.watch))
	})
	allow.build(r)
	return r
}

// recoverer turns a panic into a logged 500 problem instead of a dropped
// connection.
func (a *api) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				a.log.ErrorContext(r.Context(), "panic", slog.String("panic", safeText(fmt.Sprint(p))), slog.String("path", safeText(r.URL.Path)))
				a.writeProblem(w, r, errPanic)
			}
		}()
		next.ServeHTTP(w, r)
	})
}

var errPanic = &panicError{}

type panicError struct{}

func (*panicError) Error() string { return "internal error" }

func (a *api) healthz(w http.ResponseWriter, _ *http.Request) {
	_ = writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyDetails say what each store.NotReadyError reason means for an
// operator; the cause itself goes to the log.
var readyDetails = map[string]string{
	store.ReasonUnreachable:       "the store cannot be reached",
	store.ReasonMigrationsPending: "the database lacks migrations of this binary; run checkpointd migrate",
	store.ReasonWriteFailed:       "the store cannot commit a write (a full disk, a read-only database…); see the daemon log",
	store.ReasonWriteTimeout:      "the store did not commit a write in time",
}

// readyz answers 200 only when the store can commit a write now (a
// probe write, cached for a second: store.Ready), with warnings when
// there are any (store.ReadyWarnings), else 503 store_unavailable with a
// reason.
func (a *api) readyz(w http.ResponseWriter, r *http.Request) error {
	if err := a.Store.Ready.Ready(r.Context()); err != nil {
		var nr *store.NotReadyError
		if errors.As(err, &nr) {
			return &ProblemError{Err: err, Detail: readyDetails[nr.Reason], Extra: map[string]any{"reason": nr.Reason}}
		}
		return err
	}
	// Ready, with what an operator should hear of (PostgreSQL tables whose
	// dead rows outnumber their live ones): it serves, but slows down.
	return writeJSON(w, http.StatusOK, readyAnswer{Status: "ready", Warnings: a.Store.Ready.ReadyWarnings(r.Context())})
}

type readyAnswer struct {
	Status   string   `json:"status"`
	Warnings []string `json:"warnings,omitempty"`
}

// schema serves the checkpoint schema of ?version= (default: the version
// this daemon writes). A version it does not publish is not found rather
// than answered with another version's schema: a client validating v2
// documents against v1 would accept what the server refuses.
func (a *api) schema(w http.ResponseWriter, r *http.Request) error {
	version := int64(checkpointd.SchemaVersion)
	if q := r.URL.Query(); q.Has("version") {
		n, err := strconv.ParseInt(q.Get("version"), 10, 64)
		switch {
		case errors.Is(err, strconv.ErrRange):
			n = -1 // an integer, but no version anyone publishes
		case err != nil:
			return checkpointd.Invalid("version", "must be an integer schema version (e.g. 1)")
		}
		version = n
	}
	if version != checkpointd.SchemaVersion {
		return fmt.Errorf("checkpoint schema version %d is not published by this daemon (it publishes version %d): %w",
			version, checkpointd.SchemaVersion, checkpointd.ErrNotFound)
	}
	w.Header().Set("Content-Type", "application/schema+json")
	_, err := w.Write(a.checkpointSchema)
	return err
}
