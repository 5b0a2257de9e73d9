package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/checkpointd/checkpointd"
)

// DefaultFleetCacheTTL is how long the fleet gauges' database read is
// reused: scrapes in between (several scrapers, a short scrape interval)
// cost nothing.
const DefaultFleetCacheTTL = 10 * time.Second

// FleetReader reads the fleet gauges from the database (store.FleetCounts).
type FleetReader func(ctx context.Context) (*checkpointd.FleetCounts, error)

// WatchFleet registers the fleet gauges, read by read and cached for ttl
// (<= 0: DefaultFleetCacheTTL); clock, when set, tells the cache's time
// (tests). A read that fails drops the gauges rather than report stale
// numbers as fresh (the store counts the failure in
// checkpointd_store_errors_total); the failure is cached like a success,
// so a store that is down is asked once per ttl, not once per scrape.
// Handler reads before it gathers, so a scrape shows the failure it
// counted. Call it once, before serving.
func (m *Metrics) WatchFleet(read FleetReader, ttl time.Duration, clock checkpointd.Clock) {
	if m == nil {
		return
	}
	if ttl <= 0 {
		ttl = DefaultFleetCacheTTL
	}
	if clock == nil {
		clock = checkpointd.SystemClock{}
	}
	m.fleet = &fleetCollector{cache: cachedRead[*checkpointd.FleetCounts]{read: read, ttl: ttl, clock: clock},
		active: prometheus.NewDesc(Namespace+"_sessions_active",
			"Active sessions by the validity of their latest checkpoint (every validity present), read from the database.", []string{"validity"}, nil),
		liveness: prometheus.NewDesc(Namespace+"_sessions_active_by_liveness",
			"Active sessions by liveness: live (current run heard from within --run-liveness), unresponsive, parked (no current run).", []string{"liveness"}, nil),
		leases: prometheus.NewDesc(Namespace+"_leases_held",
			"Leases held and not past expires_at, read from the database.", nil, nil),
	}
	m.reg.MustRegister(m.fleet)
}

// fleetCollector is a prometheus.Collector over a cached database read.
type fleetCollector struct {
	cache                    cachedRead[*checkpointd.FleetCounts]
	active, liveness, leases *prometheus.Desc
}

// Describe implements prometheus.Collector.
func (c *fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.active
	ch <- c.liveness
	ch <- c.leases
}

// Collect implements prometheus.Collector.
func (c *fleetCollector) Collect(ch chan<- prometheus.Metric) {
	counts := c.counts()
	if counts == nil {
		return
	}
	for _, v := range checkpointd.Validities {
		ch <- prometheus.MustNewConstMetric(c.active, prometheus.GaugeValue, float64(counts.Active[v]), string(v))
	}
	for _, l := range []string{checkpointd.LivenessLive, checkpointd.LivenessUnresponsive, checkpointd.LivenessParked} {
		ch <- prometheus.MustNewConstMetric(c.liveness, prometheus.GaugeValue, float64(counts.ByLiveness[l]), l)
	}
	ch <- prometheus.MustNewConstMetric(c.leases, prometheus.GaugeValue, float64(counts.LeasesHeld))
}

// counts is the fleet's counts, nil when the read failed.
func (c *fleetCollector) counts() *checkpointd.FleetCounts {
	counts, _ := c.cache.get()
	return counts
}

// cachedRead is a database read reused for ttl. A failed read is cached
// like a success (an outage is asked once per ttl, not once per scrape),
// and its answer is the zero value: no numbers are kept past a failure.
type cachedRead[T any] struct {
	read  func(context.Context) (T, error)
	ttl   time.Duration
	clock checkpointd.Clock

	// mu serialises reads: concurrent scrapes wait for one read.
	mu   sync.Mutex
	done bool // a read was made, at at, with the answer last (ok: it succeeded)
	at   time.Time
	last T
	ok   bool
}

// get returns the cached answer while it is fresh, else reads again.
func (c *cachedRead[T]) get() (T, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	if c.done && now.Sub(c.at) < c.ttl && !now.Before(c.at) {
		return c.last, c.ok
	}
	ctx, cancel := context.WithTimeout(context.Background(), scrapeHookTimeout)
	defer cancel()
	v, err := c.read(ctx)
	if err != nil {
		var zero T
		v = zero
	}
	c.done, c.at, c.last, c.ok = true, now, v, err == nil
	return v, c.ok
}
