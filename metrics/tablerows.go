package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/checkpointd/checkpointd"
)

// TableRows is what the database's statistics say of one table's rows.
type TableRows struct {
	Table      string
	Live, Dead int64
}

// tableRowsTTL is how long the statistics' read is reused: they move
// slowly, and a scrape should not make the server gather them each time.
const tableRowsTTL = 30 * time.Second

// WatchTableRows registers checkpointd_store_live_rows and
// checkpointd_store_dead_rows by table, read by read (PostgreSQL's
// statistics: store.TableRows; none on SQLite) and cached for 30 s; clock,
// when set, tells the cache's time (tests). A failed read drops them for
// that scrape. Call it once, before serving.
func (m *Metrics) WatchTableRows(read func(context.Context) ([]TableRows, error), clock checkpointd.Clock) {
	if m == nil {
		return
	}
	if clock == nil {
		clock = checkpointd.SystemClock{}
	}
	m.reg.MustRegister(&tableRowsCollector{cache: cachedRead[[]TableRows]{read: read, ttl: tableRowsTTL, clock: clock},
		live: prometheus.NewDesc(Namespace+"_store_live_rows",
			"Live rows of the tables writes update or grow, from PostgreSQL's statistics (absent on SQLite).", []string{"table"}, nil),
		dead: prometheus.NewDesc(Namespace+"_store_dead_rows",
			"Dead rows (old versions vacuum has not removed) of the tables writes update or grow, from PostgreSQL's statistics (absent on SQLite); more dead than live rows means autovacuum is off or far behind.", []string{"table"}, nil),
	})
}

type tableRowsCollector struct {
	cache      cachedRead[[]TableRows]
	live, dead *prometheus.Desc
}

// Describe implements prometheus.Collector.
func (c *tableRowsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.live
	ch <- c.dead
}

// Collect implements prometheus.Collector.
func (c *tableRowsCollector) Collect(ch chan<- prometheus.Metric) {
	rows, _ := c.cache.get()
	for _, r := range rows {
		ch <- prometheus.MustNewConstMetric(c.live, prometheus.GaugeValue, float64(r.Live), r.Table)
		ch <- prometheus.MustNewConstMetric(c.dead, prometheus.GaugeValue, float64(r.Dead), r.Table)
	}
}
