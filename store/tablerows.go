package store

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd/migrations"
)

// Dead rows. On PostgreSQL every checkpoint write leaves its session
// row's old version behind until vacuum (or, for a HOT update, the next
// visit of its page) removes it; with autovacuum off or far behind, the
// dead versions pile up and each write costs more CPU (issue 29 measured
// 20–27 ms a write at 18 dead rows per live one, 0.6 ms after a VACUUM).
// The daemon cannot vacuum for the operator, so it says so: the metrics
// export the counts, and /readyz warns (docs/postgresql.md).

// TableRows is what PostgreSQL's statistics say of a table's rows: live
// ones, and dead ones vacuum has not removed yet.
type TableRows struct {
	Table string `db:"relname"`
	Live  int64  `db:"n_live_tup"`
	Dead  int64  `db:"n_dead_tup"`
}

// rowTables are the tables writes update or grow.
var rowTables = []string{"checkpoints", "events", "lease_resources", "leases", "live_refs", "sessions"}

// TableRows reads the statistics of the tables writes update or grow; nil
// on SQLite, which keeps no dead versions (it rewrites a row in place and
// reuses freed pages). Errors: ErrStoreUnavailable.
func (s *Store) TableRows(ctx context.Context) ([]TableRows, error) {
	if s.dialect != migrations.Postgres {
		return nil, nil
	}
	q, args, err := sqlx.In(`SELECT relname, n_live_tup, n_dead_tup FROM pg_stat_user_tables
WHERE schemaname = current_schema() AND relname IN (?) ORDER BY relname`, rowTables)
	if err != nil {
		return nil, err
	}
	var rows []TableRows
	if err := s.rdb.SelectContext(ctx, &rows, s.rdb.Rebind(q), args...); err != nil {
		return nil, s.classify(err)
	}
	return rows, nil
}

// bloatMinDead is the fewest dead rows a warning is about: autovacuum at
// its defaults vacuums a table once a fifth of its rows (and 50) are dead,
// so more dead rows than live ones, and this many, mean it is off or far
// behind.
const bloatMinDead = 10_000

// bloated says whether r holds more dead rows than live ones, and at
// least bloatMinDead.
func (r TableRows) bloated() bool { return r.Dead >= bloatMinDead && r.Dead > r.Live }

// DeadRowWarnings says which tables are bloated.
func DeadRowWarnings(rows []TableRows) []string {
	var out []string
	for _, r := range rows {
		if r.bloated() {
			out = append(out, fmt.Sprintf("table %s holds %d dead rows beside %d live ones: autovacuum is off or far behind, "+
				"and every write costs more until the table is vacuumed (docs/postgresql.md, \"Autovacuum and bloat\")", r.Table, r.Dead, r.Live))
		}
	}
	return out
}

// warningsTTL is how long ReadyWarnings reuses its read: /readyz is
// probed often, the statistics move slowly.
const warningsTTL = time.Minute

// warnings caches ReadyWarnings.
type warnings struct {
	mu      sync.Mutex
	at      time.Time
	last    []string
	bloated map[string]bool // the tables warned of: logged once when they become so
}

// ReadyWarnings are what /readyz says beside "ready": the tables whose
// dead rows outnumber their live ones (DeadRowWarnings), read at most once
// a minute. A read that fails warns of nothing: readiness itself is the
// write probe's (Ready).
func (s *Store) ReadyWarnings(ctx context.Context) []string {
	w := &s.warnings
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.at.IsZero() && time.Since(w.at) < warningsTTL {
		return w.last
	}
	rows, err := s.TableRows(ctx)
	if err != nil {
		return w.last
	}
	bloated := map[string]bool{}
	for _, r := range rows {
		if r.bloated() && !w.bloated[r.Table] {
			s.log.Warn("PostgreSQL: a table holds more dead rows than live ones; autovacuum is off or far behind (docs/postgresql.md)",
				slog.String("table", r.Table), slog.Int64("dead", r.Dead), slog.Int64("live", r.Live))
		}
		bloated[r.Table] = r.bloated()
	}
	w.at, w.last, w.bloated = time.Now(), DeadRowWarnings(rows), bloated
	return w.last
}
