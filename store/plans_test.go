package store_test

import (
	"strings"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestPlansAreBounded: every statement retention runs per batch (and the
// lease statements that find a grant's resource, the liveness pass's and
// an owner's list) searches its index with a bound, on both engines,
// rather than scanning a table. On PostgreSQL the
// tables are empty, so sequential scans are priced out: the test asks
// whether the index can bound the search (an Index Cond), which the
// row-value and OR forms, for one, do not share.
func TestPlansAreBounded(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		url := storetest.URL(t, b)
		storetest.OpenURL(t, url, checkpointd.NewManualClock(t0)) // migrates
		db := sqlx.NewDb(openRaw(t, b, url), map[storetest.Backend]string{storetest.SQLite: "sqlite", storetest.Postgres: "postgres"}[b])
		conn, err := db.Connx(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		explain := "EXPLAIN QUERY PLAN "
		if b == storetest.Postgres {
			explain = "EXPLAIN "
			if _, err := conn.ExecContext(t.Context(), "SET enable_seqscan = off"); err != nil {
				t.Fatal(err)
			}
		}
		for _, q := range store.PlanQueries() {
			if form, ok := store.SQLitePlanForms()[q.Name]; ok && b == storetest.SQLite {
				q.Query = form
			}
			rows, err := conn.QueryxContext(t.Context(), explain+sqlx.Rebind(sqlx.BindType(db.DriverName()), q.Query), q.Args...)
			if err != nil {
				t.Fatalf("%s: %v", q.Name, err)
			}
			var plan []string
			for rows.Next() {
				cols, err := rows.SliceScan()
				if err != nil {
					t.Fatal(err)
				}
				plan = append(plan, asString(cols[len(cols)-1]))
			}
			rows.Close()
			text := strings.Join(plan, "\n")
			index := q.Index
			if b == storetest.SQLite && strings.HasSuffix(index, "_pkey") {
				index = "sqlite_autoindex_" + strings.TrimSuffix(index, "_pkey") + "_1"
			}
			ok := strings.Contains(text, "INDEX "+index+" (")
			if b == storetest.Postgres {
				ok = (strings.Contains(text, " on "+index+" ") || strings.Contains(text, " using "+index+" ")) &&
					strings.Contains(text, "Index Cond") && !strings.Contains(text, "Seq Scan")
			}
			if !ok {
				t.Errorf("%s: the plan does not search %s by a bound:\n%s", q.Name, index, text)
			} else if testing.Verbose() {
				t.Logf("%s:\n%s", q.Name, text)
			}
		}
	})
}

func asString(v any) string {
	if b, ok := v.([]byte); ok {
		return string(b)
	}
	s, _ := v.(string)
	return s
}
