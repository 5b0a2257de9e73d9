package api_test

import (
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestReadyzWhileWritesFail is the fault-injection test of /readyz: while
// the database answers reads but fails every write (storetest.FailWrites:
// a full disk's shape on each backend), /readyz answers 503
// store_unavailable with reason write_failed — at once after a failed
// write, and from its own probe write with no traffic — and 200 again once
// writes commit. It used to answer 200 throughout.
func TestReadyzWhileWritesFail(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		url := storetest.URL(t, b)
		h := newHarnessOn(t, storetest.OpenURL(t, url, checkpointd.SystemClock{}))
		id, run, tok := h.newSession()
		h.do("GET", "/readyz", "", nil).expect(t, 200, "")

		restore := storetest.FailWrites(t, b, url)
		h.do("POST", "/v1/sessions/"+id+"/checkpoints", h.agent, checkpointDoc(run, tok)).expect(t, 503, "store_unavailable")
		h.do("GET", "/v1/sessions/"+id, h.reader, nil).expect(t, 200, "") // reads still work
		notReady := func(when string) {
			t.Helper()
			r := h.do("GET", "/readyz", "", nil)
			if r.status != 503 || r.str("code") != "store_unavailable" || r.str("reason") != "write_failed" {
				t.Fatalf("/readyz %s: %d %s, want 503 store_unavailable reason write_failed", when, r.status, r.raw)
			}
		}
		notReady("right after a failed write")
		time.Sleep(1100 * time.Millisecond) // past any cached answer: the probe's own write decides
		notReady("with no traffic")

		restore()
		deadline := time.Now().Add(5 * time.Second)
		for h.do("GET", "/readyz", "", nil).status != 200 {
			if time.Now().After(deadline) {
				t.Fatalf("/readyz still not 200 5s after writes commit again: %s", h.do("GET", "/readyz", "", nil).raw)
			}
			time.Sleep(50 * time.Millisecond)
		}
		h.do("POST", "/v1/sessions/"+id+"/checkpoints", h.agent, checkpointDoc(run, tok)).expect(t, 201, "")
	})
}

// TestReadyzWarnsOfDeadRows: on PostgreSQL, a table holding more dead rows
// than live ones (autovacuum off for it here) leaves /readyz 200 and ready,
// with a warning naming the table; on SQLite, which keeps no dead rows, the
// answer has no warnings at all.
func TestReadyzWarnsOfDeadRows(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		url := storetest.URL(t, b)
		h := newHarnessOn(t, storetest.OpenURL(t, url, checkpointd.SystemClock{}))
		for range 20 {
			h.newSession()
		}
		if b == storetest.Postgres {
			db, err := sql.Open("postgres", url)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			conn, err := db.Conn(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// 600 updates of 20 rows on an indexed column (never HOT):
			// 12,000 dead rows vacuum does not remove.
			for _, q := range []string{`ALTER TABLE sessions SET (autovacuum_enabled = false)`,
				`DO $$ BEGIN FOR i IN 1..600 LOOP UPDATE sessions SET stage = 'stage-' || i; END LOOP; END $$`,
				`SELECT pg_stat_force_next_flush()`, `SELECT 1`} {
				if _, err := conn.ExecContext(t.Context(), q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
		}
		r := h.do("GET", "/readyz", "", nil).expect(t, 200, "")
		warnings, hasWarnings := r.body["warnings"].([]any)
		if r.str("status") != "ready" {
			t.Errorf("/readyz: %s", r.raw)
		}
		if b == storetest.SQLite {
			if _, ok := r.body["warnings"]; ok {
				t.Errorf("/readyz on SQLite warns: %s", r.raw)
			}
			return
		}
		if !hasWarnings || len(warnings) != 1 || !strings.Contains(warnings[0].(string), "table sessions holds") {
			t.Errorf("/readyz with a bloated sessions table: %s", r.raw)
		}
	})
}
