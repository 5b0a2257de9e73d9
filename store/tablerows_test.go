package store_test

import (
	"strings"
	"testing"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestDeadRowWarnings: the store says when a table holds more dead rows
// than live ones (autovacuum off or far behind): on PostgreSQL, after
// updates vacuum did not follow, in /readyz's warnings; SQLite keeps no
// dead rows and warns of none.
func TestDeadRowWarnings(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		url := storetest.URL(t, b)
		s := storetest.OpenURL(t, url, checkpointd.NewManualClock(t0))
		for i := range 20 {
			drainSession(t, s, "acme/widgets", "author", string(rune('a'+i)))
		}
		if b == storetest.SQLite {
			if rows, err := s.TableRows(ctx); err != nil || rows != nil {
				t.Errorf("SQLite's table rows: %v, %v; want none", rows, err)
			}
			if w := s.ReadyWarnings(ctx); w != nil {
				t.Errorf("SQLite warns: %v", w)
			}
			return
		}
		if w := s.ReadyWarnings(ctx); w != nil {
			t.Errorf("a store just made warns: %v", w)
		}
		// 20 live rows; 600 updates of an indexed column (no HOT update)
		// leave 12,000 dead ones with autovacuum off for the table.
		raw := openRaw(t, b, url)
		conn, err := raw.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, `ALTER TABLE sessions SET (autovacuum_enabled = false)`); err != nil {
			t.Fatal(err)
		}
		for i := range 600 {
			if _, err := conn.ExecContext(ctx, `UPDATE sessions SET stage = $1`, string(rune('a'+i%26))); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := conn.ExecContext(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(ctx, `SELECT 1`); err != nil { // a transaction's end flushes
			t.Fatal(err)
		}
		rows, err := s.TableRows(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var sessions *store.TableRows
		for i := range rows {
			if rows[i].Table == "sessions" {
				sessions = &rows[i]
			}
		}
		// (The store's own inserts reach the statistics when its
		// connections flush them: live may lag.)
		if sessions == nil || sessions.Dead < 10_000 || sessions.Live > 20 {
			t.Fatalf("sessions' rows: %+v in %+v; want at most 20 live and 12,000 dead", sessions, rows)
		}
		// The warning cached a minute ago is read again once its time is up.
		store.ExpireReadyWarnings(s)
		w := s.ReadyWarnings(ctx)
		if len(w) != 1 || !strings.Contains(w[0], "table sessions holds") || !strings.Contains(w[0], "autovacuum") {
			t.Errorf("warnings: %q", w)
		}
	})
}

// TestDeadRowWarningThreshold: a table warns when its dead rows outnumber
// its live ones and are at least 10,000 — not for a small table vacuum
// will reach, nor for a large one a fifth dead.
func TestDeadRowWarningThreshold(t *testing.T) {
	for _, tc := range []struct {
		rows store.TableRows
		warn bool
	}{
		{store.TableRows{Table: "sessions", Live: 9_635, Dead: 176_295}, true},
		{store.TableRows{Table: "sessions", Live: 100, Dead: 9_999}, false},
		{store.TableRows{Table: "checkpoints", Live: 1_000_000, Dead: 200_000}, false},
		{store.TableRows{Table: "events", Live: 10_000, Dead: 10_001}, true},
	} {
		if got := len(store.DeadRowWarnings([]store.TableRows{tc.rows})) == 1; got != tc.warn {
			t.Errorf("%+v: warns %v, want %v", tc.rows, got, tc.warn)
		}
	}
}
