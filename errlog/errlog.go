// Package errlog records durable errors (docs/errors.md): failures that
// matter after the request or pass that met them — refused webhook
// deliveries, failed checkpoint writes, repositories reconcile could not
// check — written to the store's errors table and listed by GET /v1/errors.
//
// Recording never fails its caller: a refusal stays the refusal it was
// when the store cannot record it, and a failed recording is logged and
// counted instead. Unauthenticated and client-driven sources are rate
// limited per source, so a flood costs the writer little; the store caps
// the rows per source.
package errlog

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/metrics"
)

// Store is what the recorder needs of persistence.
type Store interface {
	RecordErrors(ctx context.Context, recs []checkpointd.ErrorRecord) error
}

// Defaults of a Recorder.
const (
	// DefaultRate and DefaultBurst bound the recordings per second of a
	// rate-limited source: enough for every real failure, little for a
	// flood (the metrics still count every refusal).
	DefaultRate  = 10.0
	DefaultBurst = 100
	// DefaultTimeout bounds one recording, detached from the request.
	DefaultTimeout = 5 * time.Second
	// MaxBatch bounds the rows of one call (one reconcile pass).
	MaxBatch = 1000
)

// Recorder writes durable errors. A nil *Recorder records nothing.
type Recorder struct {
	store   Store
	log     *slog.Logger
	metrics *metrics.Metrics
	// Limited are the sources that are rate limited: webhook (anyone who
	// reaches the daemon can send one) and checkpoint_write (an agent can
	// send bad documents in a loop). Reconcile records at most one row per
	// repository per pass and is not limited.
	Limited map[checkpointd.ErrorSource]bool
	Rate    float64
	Burst   int
	Timeout time.Duration
	now     func() time.Time

	mu       sync.Mutex
	limiters map[checkpointd.ErrorSource]*rate.Limiter
}

// New returns a Recorder over s. log and m may be nil.
func New(s Store, log *slog.Logger, m *metrics.Metrics) *Recorder {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Recorder{store: s, log: log, metrics: m,
		Limited: map[checkpointd.ErrorSource]bool{checkpointd.ErrorSourceWebhook: true, checkpointd.ErrorSourceCheckpointWrite: true},
		Rate:    DefaultRate, Burst: DefaultBurst, Timeout: DefaultTimeout, now: time.Now,
		limiters: map[checkpointd.ErrorSource]*rate.Limiter{}}
}

// Record writes recs in one transaction, detached from ctx's cancellation
// (a client that hung up does not erase its failure) but bounded by
// Timeout. It reports nothing: failures are logged and counted.
func (r *Recorder) Record(ctx context.Context, recs ...checkpointd.ErrorRecord) {
	if r == nil || r.store == nil {
		return
	}
	keep := recs[:0:0]
	for _, rec := range recs {
		if len(keep) == MaxBatch {
			r.metrics.ErrorDropped(rec.Source, metrics.DropRateLimited)
			continue
		}
		if r.Limited[rec.Source] && !r.allow(rec.Source) {
			r.metrics.ErrorDropped(rec.Source, metrics.DropRateLimited)
			continue
		}
		keep = append(keep, rec)
	}
	if len(keep) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.Timeout)
	defer cancel()
	if err := r.store.RecordErrors(rctx, keep); err != nil {
		r.log.ErrorContext(ctx, "cannot record a durable error", slog.String("source", string(keep[0].Source)),
			slog.String("code", keep[0].Code), slog.Int("count", len(keep)), slog.Any("err", err))
		for _, rec := range keep {
			r.metrics.ErrorDropped(rec.Source, metrics.DropStoreFailed)
		}
		return
	}
	for _, rec := range keep {
		r.metrics.ErrorRecorded(rec.Source)
	}
}

// allow takes a token of src's bucket (Burst tokens, refilled at Rate per
// second), made on first use.
func (r *Recorder) allow(src checkpointd.ErrorSource) bool {
	r.mu.Lock()
	l := r.limiters[src]
	if l == nil {
		l = rate.NewLimiter(rate.Limit(r.Rate), r.Burst)
		r.limiters[src] = l
	}
	r.mu.Unlock()
	return l.AllowN(r.now(), 1)
}
