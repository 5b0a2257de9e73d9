// Package metrics defines every Prometheus metric of checkpointd on one
// dedicated registry (docs/metrics.md). serve builds one Metrics and hands
// it down; every method is safe on a nil *Metrics, so packages and tests
// that do not care pass nothing.
//
// No label carries user content: every label value comes from a fixed set
// in this package, and anything else is counted as "other".
package metrics

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/checkpointd/checkpointd"
)

// Namespace prefixes every checkpointd metric.
const Namespace = "checkpointd"

// Metrics holds the collectors. Build it with New.
type Metrics struct {
	reg      *prometheus.Registry
	onScrape func(ctx context.Context)
	fleet    *fleetCollector // WatchFleet; nil without

	checkpointWrites   *prometheus.CounterVec
	checkpointWriteDur prometheus.Histogram
	checkpointReads    *prometheus.CounterVec
	redactions         prometheus.Counter
	idempotency        *prometheus.CounterVec
	webhookDeliveries  *prometheus.CounterVec
	validity           *prometheus.CounterVec
	leaseEvents        *prometheus.CounterVec
	reconcilePasses    *prometheus.CounterVec
	reconcileDur       prometheus.Histogram
	forgeCalls         *prometheus.CounterVec
	drainState         *prometheus.GaugeVec
	drainBlocking      prometheus.Gauge
	drainDecisions     *prometheus.CounterVec
	storeErrors        *prometheus.CounterVec
	storeRetries       *prometheus.CounterVec
	errorsRecorded     *prometheus.CounterVec
	errorsDropped      *prometheus.CounterVec
	httpRequests       *prometheus.CounterVec
	httpDuration       *prometheus.HistogramVec
	webhookAnswer      prometheus.Histogram
	settleDur          prometheus.Histogram
	watchers           prometheus.Gauge
	watchDropped       *prometheus.CounterVec
	buildInfo          *prometheus.GaugeVec
}

// New registers every metric, and the Go runtime and process collectors,
// on a fresh registry.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	f := func(c prometheus.Collector) { reg.MustRegister(c) }
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}, labels)
		f(c)
		return c
	}
	m := &Metrics{reg: reg}
	m.checkpointWrites = counter("checkpoint_writes_total",
		"Checkpoint write requests by outcome: ok (written or replayed) or the problem code of the refusal.", "outcome")
	m.checkpointWriteDur = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: "checkpoint_write_duration_seconds",
		Help:    "Time to handle a checkpoint write that committed a new checkpoint, from request to response.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}})
	f(m.checkpointWriteDur)
	m.checkpointReads = counter("checkpoint_reads_total",
		"Checkpoint read requests by kind (get, list, resume) and outcome (ok or a problem code).", "kind", "outcome")
	m.redactions = prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: "redactions_total",
		Help: "Secrets replaced by a redaction marker in committed checkpoints."})
	f(m.redactions)
	m.idempotency = counter("idempotency_total",
		"Requests carrying an Idempotency-Key that were not plain first writes, by result: replayed, conflict, in_flight.", "result")
	m.webhookDeliveries = counter("webhook_deliveries_total",
		"Webhook deliveries by event (a fixed set of forge event names, else other, none without the header) and outcome.", "event", "outcome")
	m.webhookAnswer = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: "webhook_answer_duration_seconds",
		Help:    "Time from a webhook delivery's arrival to its flushed answer, for applied deliveries: what the forge waits for (its limit is 5 s).",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}})
	f(m.webhookAnswer)
	m.settleDur = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: "settle_duration_seconds",
		Help:    "Time to re-judge the sessions bound to one ref after its live state changed (after the delivery's answer).",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}})
	f(m.settleDur)
	m.validity = counter("validity_transitions_total",
		"Sessions whose validity changed, by cause (webhook, reconcile, checkpoint, lease, restart) and new state.", "cause", "to")
	m.leaseEvents = counter("lease_events_total",
		"Lease events by kind: acquired, renewed, released, expired, moved (to a takeover run).", "event")
	m.reconcilePasses = counter("reconcile_passes_total",
		"Reconcile passes by outcome: ok, forge_errors (some refs unanswered), no_forge, failed (stopped early).", "outcome")
	m.reconcileDur = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: "reconcile_pass_duration_seconds",
		Help:    "Wall time of a reconcile pass.",
		Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}})
	f(m.reconcileDur)
	m.forgeCalls = counter("reconcile_forge_calls_total",
		"Forge API calls made by reconcile, by outcome: ok, not_found, rate_limited, server_error, client_error, timeout, unreachable, error.", "outcome")
	m.drainState = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "drain_state",
		Help: "1 for the drain state this replica last saw (none, draining, completed), 0 for the others."}, []string{"state"})
	f(m.drainState)
	m.drainBlocking = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "drain_blocking_sessions",
		Help: "Active sessions blocking the drain, read at this scrape (0 without a drain)."})
	f(m.drainBlocking)
	m.drainDecisions = counter("drain_decisions_total",
		"Drain gate decisions by outcome: completed, blocked, failed (could not decide: fail closed).", "outcome")
	m.storeErrors = counter("store_errors_total",
		"Database failures turned into store_unavailable, by operation class: read, write, ping.", "op")
	m.storeRetries = counter("store_retries_total",
		"Write transactions tried again, by reason: conflict (deadlock, serialization failure, lock timeout, SQLite busy), connection (a pooled connection the server had ended).", "reason")
	m.errorsRecorded = counter("errors_recorded_total",
		"Durable errors written to the errors table, by source.", "source")
	m.errorsDropped = counter("errors_dropped_total",
		"Durable errors not written, by source and reason: rate_limited, store_failed.", "source", "reason")
	m.httpRequests = counter("http_requests_total",
		"HTTP requests by method, route pattern and status class (2xx…5xx).", "method", "route", "status")
	m.httpDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "http_request_duration_seconds",
		Help: "HTTP request latency by method and route pattern.", Buckets: prometheus.DefBuckets}, []string{"method", "route"})
	f(m.httpDuration)
	m.watchers = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "watchers",
		Help: "Open GET /v1/watch streams on this replica."})
	f(m.watchers)
	m.watchDropped = counter("watch_dropped_total",
		"Watch streams this replica ended because the client fell behind: slow_client (its queue filled), write_timeout (a write blocked), memory_budget (the queues of all streams passed the budget; it held most).", "reason")
	m.buildInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "build_info",
		Help: "Always 1, labelled with the daemon's version, its commit (revision, empty when the build recorded none) and the Go version it was built with."},
		[]string{"version", "revision", "goversion"})
	f(m.buildInfo)
	f(collectors.NewGoCollector())
	f(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.SetDrainState(DrainNone)
	m.startAtZero()
	return m
}

// SetBuildInfo says which build this daemon is (checkpointd_build_info);
// call it once, at start.
func (m *Metrics) SetBuildInfo(version, revision, goVersion string) {
	if m == nil {
		return
	}
	m.buildInfo.Reset()
	m.buildInfo.WithLabelValues(version, revision, goVersion).Set(1)
}

// startAtZero creates every labelled counter's series for its known label
// values, at 0: an alert on rate() or increase() then fires on the first
// event, instead of missing it because the series appeared with it. The
// HTTP counters are left out (their routes are many); the webhook counter
// starts only for the events the daemon acts on, "other" and "none".
func (m *Metrics) startAtZero() {
	zero := func(c *prometheus.CounterVec, sets ...[]string) {
		var walk func(values []string, rest [][]string)
		walk = func(values []string, rest [][]string) {
			if len(rest) == 0 {
				c.WithLabelValues(values...)
				return
			}
			for _, v := range rest[0] {
				walk(append(values, v), rest[1:])
			}
		}
		walk(nil, sets)
	}
	zero(m.checkpointWrites, problemCodes)
	zero(m.checkpointReads, readKinds, problemCodes)
	zero(m.idempotency, idempotencyResults)
	zero(m.webhookDeliveries, []string{"push", "create", "delete", "pull_request", "pull_request_sync", "other", "none"}, webhookOutcomes)
	zero(m.validity, validityCauses, validities)
	zero(m.leaseEvents, leaseEvents)
	zero(m.reconcilePasses, passOutcomes)
	zero(m.forgeCalls, forgeOutcomes)
	zero(m.drainDecisions, drainDecisions)
	zero(m.storeErrors, storeOps)
	zero(m.storeRetries, retryReasons)
	zero(m.errorsRecorded, errorSources)
	zero(m.errorsDropped, errorSources, dropReasons)
	zero(m.watchDropped, watchDropReasons)
}

// Registry is the registry the metrics live on (for tests and extra
// collectors); nil for a nil Metrics.
func (m *Metrics) Registry() *prometheus.Registry {
	if m == nil {
		return nil
	}
	return m.reg
}

// Handler serves the exposition format (GET /metrics). A nil Metrics
// serves 404. Each scrape first runs the OnScrape hook, if any.
func (m *Metrics) Handler() http.Handler {
	if m == nil {
		return http.NotFoundHandler()
	}
	g := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		if m.onScrape != nil {
			ctx, cancel := context.WithTimeout(context.Background(), scrapeHookTimeout)
			m.onScrape(ctx)
			cancel()
		}
		if m.fleet != nil {
			// Read (or not, when cached) before gathering, which collects
			// in parallel: a failed read's count shows in this scrape.
			m.fleet.counts()
		}
		return m.reg.Gather()
	})
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{})
}

// scrapeHookTimeout bounds OnScrape: a scrape answers even when the store
// does not.
const scrapeHookTimeout = 2 * time.Second

// OnScrape sets fn to run before every scrape, to refresh gauges that
// mirror shared state (the drain, which another replica may have changed).
// Call it before serving.
func (m *Metrics) OnScrape(fn func(ctx context.Context)) {
	if m != nil {
		m.onScrape = fn
	}
}

// CheckpointWrite counts a checkpoint write request by outcome ("ok" or a
// problem code); took is observed only for a write that committed a new
// checkpoint (not a replay, not a refusal), with its redactions.
func (m *Metrics) CheckpointWrite(outcome string, committed bool, took time.Duration, redactions int) {
	if m == nil {
		return
	}
	m.checkpointWrites.WithLabelValues(oneOf(outcome, problemCodes)).Inc()
	if committed {
		m.checkpointWriteDur.Observe(took.Seconds())
		m.redactions.Add(float64(max(redactions, 0)))
	}
}

// Read kinds of CheckpointRead.
const (
	ReadGet    = "get"
	ReadList   = "list"
	ReadResume = "resume"
)

var readKinds = []string{ReadGet, ReadList, ReadResume}

// CheckpointRead counts a checkpoint read request.
func (m *Metrics) CheckpointRead(kind, outcome string) {
	if m == nil {
		return
	}
	m.checkpointReads.WithLabelValues(oneOf(kind, readKinds), oneOf(outcome, problemCodes)).Inc()
}

// Idempotency results.
const (
	IdemReplayed = "replayed"
	IdemConflict = "conflict"
	IdemInFlight = "in_flight"
)

var idempotencyResults = []string{IdemReplayed, IdemConflict, IdemInFlight}

// Idempotency counts a keyed request that was replayed or refused.
func (m *Metrics) Idempotency(result string) {
	if m == nil {
		return
	}
	m.idempotency.WithLabelValues(oneOf(result, idempotencyResults)).Inc()
}

// WebhookDelivery counts a delivery by its event header (mapped onto the
// fixed set; "" is none) and outcome (applied, duplicate, ignored,
// store_unavailable or a rejection code).
func (m *Metrics) WebhookDelivery(event, outcome string) {
	if m == nil {
		return
	}
	ev := "none"
	if event != "" {
		ev = oneOf(event, webhookEvents)
	}
	m.webhookDeliveries.WithLabelValues(ev, oneOf(outcome, webhookOutcomes)).Inc()
}

// ValidityChanged counts n sessions moved to validity to (store.Observer).
func (m *Metrics) ValidityChanged(cause string, to checkpointd.Validity, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.validity.WithLabelValues(oneOf(cause, validityCauses), oneOf(string(to), validities)).Add(float64(n))
}

// WebhookAnswered observes the time an applied delivery waited for its
// answer.
func (m *Metrics) WebhookAnswered(took time.Duration) {
	if m == nil {
		return
	}
	m.webhookAnswer.Observe(took.Seconds())
}

// RefSettled observes one ref's settle (store.Observer).
func (m *Metrics) RefSettled(took time.Duration) {
	if m == nil {
		return
	}
	m.settleDur.Observe(took.Seconds())
}

// LeaseEvent counts one lease event (store.Observer).
func (m *Metrics) LeaseEvent(kind string) {
	if m == nil {
		return
	}
	m.leaseEvents.WithLabelValues(oneOf(kind, leaseEvents)).Inc()
}

// StoreError counts a database failure (store.Observer).
func (m *Metrics) StoreError(op string) {
	if m == nil {
		return
	}
	m.storeErrors.WithLabelValues(oneOf(op, storeOps)).Inc()
}

// StoreRetry counts a write transaction tried again (store.Observer).
func (m *Metrics) StoreRetry(reason string) {
	if m == nil {
		return
	}
	m.storeRetries.WithLabelValues(oneOf(reason, retryReasons)).Inc()
}

// Reconcile pass outcomes.
const (
	PassOK          = "ok"
	PassForgeErrors = "forge_errors"
	PassNoForge     = "no_forge"
	PassFailed      = "failed"
)

var passOutcomes = []string{PassOK, PassForgeErrors, PassNoForge, PassFailed}

// ReconcilePass counts a pass and observes its duration.
func (m *Metrics) ReconcilePass(outcome string, took time.Duration) {
	if m == nil {
		return
	}
	m.reconcilePasses.WithLabelValues(oneOf(outcome, passOutcomes)).Inc()
	m.reconcileDur.Observe(took.Seconds())
}

// ForgeCall counts one forge API call by outcome.
func (m *Metrics) ForgeCall(outcome string) {
	if m == nil {
		return
	}
	m.forgeCalls.WithLabelValues(oneOf(outcome, forgeOutcomes)).Inc()
}

// Drain states of SetDrainState.
const (
	DrainNone      = "none"
	DrainDraining  = "draining"
	DrainCompleted = "completed"
)

// SetDrainState sets the one-hot drain state gauge.
func (m *Metrics) SetDrainState(state string) {
	if m == nil {
		return
	}
	state = oneOf(state, []string{DrainNone, DrainDraining, DrainCompleted})
	for _, s := range []string{DrainNone, DrainDraining, DrainCompleted} {
		v := 0.0
		if s == state {
			v = 1
		}
		m.drainState.WithLabelValues(s).Set(v)
	}
}

// SetDrain sets the drain gauges from a drain state just read or decided:
// the drain gating new work (nil: none) and, while one gates, its counts.
func (m *Metrics) SetDrain(d *checkpointd.Drain, c *checkpointd.DrainCounts) {
	state := DrainNone
	if d != nil && d.Gating {
		state = DrainDraining
		if d.State == checkpointd.DrainCompleted {
			state = DrainCompleted
		}
	}
	m.SetDrainState(state)
	if c != nil && state != DrainNone {
		m.SetDrainBlocking(c.Blocking)
	} else {
		m.SetDrainBlocking(0)
	}
}

// SetDrainBlocking sets the number of sessions blocking the drain.
func (m *Metrics) SetDrainBlocking(n int64) {
	if m == nil {
		return
	}
	m.drainBlocking.Set(float64(n))
}

// DrainDecision counts a decision of the drain gate: completed, blocked,
// or failed when it could not decide.
func (m *Metrics) DrainDecision(outcome string) {
	if m == nil {
		return
	}
	m.drainDecisions.WithLabelValues(oneOf(outcome, drainDecisions)).Inc()
}

// Reasons a durable error was dropped.
const (
	DropRateLimited = "rate_limited"
	DropStoreFailed = "store_failed"
)

var dropReasons = []string{DropRateLimited, DropStoreFailed}

// ErrorRecorded counts a durable error written.
func (m *Metrics) ErrorRecorded(source checkpointd.ErrorSource) {
	if m == nil {
		return
	}
	m.errorsRecorded.WithLabelValues(oneOf(string(source), errorSources)).Inc()
}

// ErrorDropped counts a durable error that was not written.
func (m *Metrics) ErrorDropped(source checkpointd.ErrorSource, reason string) {
	if m == nil {
		return
	}
	m.errorsDropped.WithLabelValues(oneOf(string(source), errorSources), oneOf(reason, dropReasons)).Inc()
}

// HTTPRequest counts a served request by method, route pattern (as the
// router has it, never the path) and status class.
func (m *Metrics) HTTPRequest(method, route string, status int, took time.Duration) {
	if m == nil {
		return
	}
	method = oneOf(method, httpMethods)
	m.httpRequests.WithLabelValues(method, route, statusClass(status)).Inc()
	m.httpDuration.WithLabelValues(method, route).Observe(took.Seconds())
}

func statusClass(status int) string {
	switch {
	case status < 100:
		return "other"
	case status < 200:
		return "1xx"
	case status < 300:
		return "2xx"
	case status < 400:
		return "3xx"
	case status < 500:
		return "4xx"
	case status < 600:
		return "5xx"
	}
	return "other"
}

// Reasons a watch stream is dropped.
const (
	WatchSlowClient   = "slow_client"
	WatchWriteTimeout = "write_timeout"
	WatchMemoryBudget = "memory_budget"
)

var watchDropReasons = []string{WatchSlowClient, WatchWriteTimeout, WatchMemoryBudget}

// SetWatchers sets the number of open watch streams.
func (m *Metrics) SetWatchers(n int) {
	if m == nil {
		return
	}
	m.watchers.Set(float64(n))
}

// WatchDropped counts a watch stream ended because its client fell behind.
func (m *Metrics) WatchDropped(reason string) {
	if m == nil {
		return
	}
	m.watchDropped.WithLabelValues(oneOf(reason, watchDropReasons)).Inc()
}
