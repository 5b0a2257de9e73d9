package store_test

import (
	"database/sql"
	"strings"
	"testing"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestUnsettledProbesReadTheirIndex: with many refs, all settled and the
// table analyzed, the probe every validity-carrying answer makes first is
// a read of the (empty) partial index, not a scan of every ref. The test
// runs the planner at its defaults, on statistics of 5 000 refs.
func TestUnsettledProbesReadTheirIndex(t *testing.T) {
	storetest.RequirePostgres(t)
	ctx := t.Context()
	url := storetest.URL(t, storetest.Postgres)
	storetest.OpenURL(t, url, checkpointd.SystemClock{}) // migrates
	raw := openRaw(t, storetest.Postgres, url)
	for _, q := range []string{
		`INSERT INTO live_refs (repo_key, ref, head, observed_at, source, version, settled_version)
SELECT 'acme/r' || (i % 50), 'branch:b' || i, md5(i::text), 1, 'webhook:d', 2, 2 FROM generate_series(1, 5000) i`,
		`ANALYZE live_refs`,
	} {
		if _, err := raw.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for name, probe := range store.UnsettledProbes {
		if p := explain(t, raw, probe); !strings.Contains(p, "live_refs_unsettled") || strings.Contains(p, "Seq Scan on live_refs") {
			t.Errorf("%s:\n%s\nwant a read of live_refs_unsettled", name, p)
		}
	}
}

// explain is PostgreSQL's plan for query ($n placeholders) with args, one
// line per node.
func explain(t *testing.T, db *sql.DB, query string, args ...any) string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), "EXPLAIN "+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var l string
		if err := rows.Scan(&l); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, l)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}
