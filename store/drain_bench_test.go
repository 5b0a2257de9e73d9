package store_test

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// Drain benchmark size: CHECKPOINTD_BENCH_DRAIN_SESSIONS overrides the
// number of active sessions (default 100k), of which one in twenty blocks.
func drainBenchSize(b *testing.B) (active, every int) {
	active, every = 100_000, 20
	if v := os.Getenv("CHECKPOINTD_BENCH_DRAIN_SESSIONS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < every {
			b.Fatalf("CHECKPOINTD_BENCH_DRAIN_SESSIONS=%q", v)
		}
		active = n
	}
	return active, every
}

// seedDrainURL fills the fresh database at url with active sessions, one
// run and one complete checkpoint each, and a drain running since before
// every checkpoint; one session in every is not ready (no checkpoint since
// the drain, incomplete, stale, lease lost, unverified in turn). When
// leased, each run holds a lease (lea_b<i>, for an hour) that its
// checkpoint names. It seeds with SQL on its own connection: the API would
// take minutes for 100k.
func seedDrainURL(tb testing.TB, be storetest.Backend, url string, active, every int, leased bool) *store.Store {
	tb.Helper()
	s := storetest.OpenURL(tb, url, checkpointd.SystemClock{})
	db := openRaw(tb, be, url)
	start := time.Now().Add(-time.Hour).UnixMicro()
	written := start + 1000
	// ids sort numerically: ses_b1000000, ses_b1000001, ...
	series := fmt.Sprintf(`WITH RECURSIVE n(i) AS (SELECT 1000000 UNION ALL SELECT i + 1 FROM n WHERE i < %d) `, 1000000+active-1)
	stmts := []string{
		series + `INSERT INTO sessions (id, repo, repo_key, role, issue, branch, state, created_at, updated_at,
    current_run_id, run_seq, checkpoint_seq, event_seq, head, validity, validity_at,
    checkpoint_at, latest_complete, latest_missing, drain_ready)
SELECT 'ses_b' || i, 'acme/r' || (i % 200), 'acme/r' || (i % 200), 'author', i, 'fix-' || i, 'active', ` +
			fmt.Sprint(start) + `, ` + fmt.Sprint(written) + `, 'run_b' || i, 1, 1, 3,
    '0123456789abcdef0123456789abcdef01234567', 'valid', ` + fmt.Sprint(written) + `, ` + fmt.Sprint(written) + `, TRUE, '[]', TRUE FROM n`,
		series + `INSERT INTO runs (id, session_id, fencing_token, agent, started_at)
SELECT 'run_b' || i, 'ses_b' || i, 1, '{"runtime":"bench"}', ` + fmt.Sprint(start) + ` FROM n`,
		// The blocking ones, one reason each in turn.
		`UPDATE sessions SET drain_ready = FALSE, checkpoint_at = ` + fmt.Sprint(start-1000) + `
WHERE id IN (SELECT id FROM sessions WHERE (CAST(substr(id, 6) AS BIGINT) % ` + fmt.Sprint(every) + `) = 0
    AND (CAST(substr(id, 6) AS BIGINT) / ` + fmt.Sprint(every) + `) % 5 = 0)`,
		`UPDATE sessions SET drain_ready = FALSE, latest_complete = FALSE, latest_missing = '["next_action"]'
WHERE (CAST(substr(id, 6) AS BIGINT) % ` + fmt.Sprint(every) + `) = 0 AND (CAST(substr(id, 6) AS BIGINT) / ` + fmt.Sprint(every) + `) % 5 = 1`,
		`UPDATE sessions SET validity = 'stale' WHERE (CAST(substr(id, 6) AS BIGINT) % ` + fmt.Sprint(every) + `) = 0
    AND (CAST(substr(id, 6) AS BIGINT) / ` + fmt.Sprint(every) + `) % 5 = 2`,
		`UPDATE sessions SET validity = 'lease_lost' WHERE (CAST(substr(id, 6) AS BIGINT) % ` + fmt.Sprint(every) + `) = 0
    AND (CAST(substr(id, 6) AS BIGINT) / ` + fmt.Sprint(every) + `) % 5 = 3`,
		`UPDATE sessions SET validity = 'unverified' WHERE (CAST(substr(id, 6) AS BIGINT) % ` + fmt.Sprint(every) + `) = 0
    AND (CAST(substr(id, 6) AS BIGINT) / ` + fmt.Sprint(every) + `) % 5 = 4`,
		`INSERT INTO drains (id, reason, started_at, started_by, state, is_open) VALUES ('drn_bench', 'bench', ` +
			fmt.Sprint(start) + `, 'bench', 'running', 1)`,
		`ANALYZE`,
	}
	for i, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			tb.Fatalf("seed: %v\n%s", err, q)
		}
		if i == 1 {
			seedCheckpoints(tb, be, db, active, written, leased)
			if leased {
				q := series + `INSERT INTO leases (id, resource_key, kind, repo, repo_key, branch, session_id, run_id,
    fencing_token, state, acquired_at, expires_at, term)
SELECT 'lea_b' || i, 'branch:acme/r' || (i % 200) || ':fix-' || i, 'branch', 'acme/r' || (i % 200), 'acme/r' || (i % 200),
    'fix-' || i, 'ses_b' || i, 'run_b' || i, 1, 'held', ` + fmt.Sprint(start) + `, ` + fmt.Sprint(time.Now().Add(time.Hour).UnixMicro()) + `, 3600000000 FROM n`
				if _, err := db.Exec(q); err != nil {
					tb.Fatalf("seed leases: %v\n%s", err, q)
				}
			}
		}
	}
	if be == storetest.Postgres {
		// Index-only scans need the visibility map: as autovacuum leaves a
		// table that is mostly read.
		if _, err := db.Exec(`VACUUM ANALYZE`); err != nil {
			tb.Fatal(err)
		}
	}
	return s
}

// seedCheckpoints gives each seeded session its checkpoint 1: the
// reference document (testdata/checkpoint-full.json, ~3 KB, without its
// leases) stored as a write stores it — the clear part with its digest, and
// the free text sealed under the test keys for that session's row — so
// what the gate checks of 100k latest checkpoints is what agents write.
// When leased, each names its run's lease, lea_b<i>.
func seedCheckpoints(tb testing.TB, be storetest.Backend, db *sql.DB, active int, written int64, leased bool) {
	tb.Helper()
	raw, err := os.ReadFile("../testdata/checkpoint-full.json")
	if err != nil {
		tb.Fatal(err)
	}
	var doc checkpointd.Document
	if err := json.Unmarshal(raw, &doc); err != nil {
		tb.Fatal(err)
	}
	doc.Leases = nil
	clear, private := checkpointd.SplitSealed(doc)
	clearJSON, err := json.Marshal(clear)
	if err != nil {
		tb.Fatal(err)
	}
	digest := store.DocumentDigest(clearJSON)
	const batch = 500
	for first := 0; first < active; first += batch {
		var q strings.Builder
		var args []any
		q.WriteString(`INSERT INTO checkpoints (session_id, seq, run_id, fencing_token, created_at, stage, branch, head,
    digest, complete, missing, document, sealed, document_digest) VALUES `)
		for i := first; i < min(first+batch, active); i++ {
			ph := func(v any) string {
				args = append(args, v)
				if be == storetest.Postgres {
					return "$" + strconv.Itoa(len(args))
				}
				return "?"
			}
			id := "ses_b" + strconv.Itoa(1000000+i)
			clearJSON, digest := clearJSON, digest
			if leased {
				leasedDoc := clear
				leasedDoc.Leases = []checkpointd.LeaseRef{{LeaseID: "lea_b" + strconv.Itoa(1000000+i), FencingToken: 1}}
				if clearJSON, err = json.Marshal(leasedDoc); err != nil {
					tb.Fatal(err)
				}
				digest = store.DocumentDigest(clearJSON)
			}
			if i > first {
				q.WriteString(", ")
			}
			fmt.Fprintf(&q, "(%s, 1, %s, 1, %d, 'implementing', %s, '0123456789abcdef0123456789abcdef01234567', 'hmac-sha256:v1:00', TRUE, '[]', %s, %s, %s)",
				ph(id), ph("run_b"+strconv.Itoa(1000000+i)), written, ph("fix-"+strconv.Itoa(1000000+i)), ph(string(clearJSON)),
				ph(storetest.Keys.Seal(private, store.CheckpointAAD(id, 1))), ph(digest))
		}
		if _, err := db.Exec(q.String(), args...); err != nil {
			tb.Fatalf("seed checkpoints: %v", err)
		}
	}
}

// openRaw opens a plain connection pool on a test database, closed when tb
// ends.
func openRaw(tb testing.TB, be storetest.Backend, url string) *sql.DB {
	tb.Helper()
	driver := "postgres"
	if be == storetest.SQLite {
		driver, url = "sqlite", "file:"+url+"?_pragma=busy_timeout(5000)"
	}
	db, err := sql.Open(driver, url)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// BenchmarkDrain measures the store time of the drain gate over 100k active
// sessions of which 5k block: the status read behind GET /v1/drain, the
// list of sessions blocked only by unverified that complete hands to
// reconcile, the blocked decision behind POST /v1/drain/complete
// (evaluation and the decision stored on the drain), and, apart, what the
// gate does after answering the first decision of a drain: a drain.blocked
// event in every active session's log (note-blocked). It reports the peak resident
// memory of the test process (peak-rss-MB).
func BenchmarkDrain(b *testing.B) {
	active, every := drainBenchSize(b)
	eachBackend(b, func(b *testing.B, be storetest.Backend) {
		url := storetest.URL(b, be)
		s := seedDrainURL(b, be, url, active, every, false)
		db := openRaw(b, be, url)
		ctx := b.Context()
		wantBlocking := int64(active / every)
		b.Run("status", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				st, err := s.DrainStatus(ctx, store.DrainQuery{Limit: 50})
				if err != nil {
					b.Fatal(err)
				}
				if st.Counts.Blocking != wantBlocking || st.Counts.Active != int64(active) || len(st.Blocking) != 50 {
					b.Fatalf("counts %+v, %d listed", st.Counts, len(st.Blocking))
				}
			}
			reportRSS(b)
		})
		b.Run("unverified", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ids, err := s.DrainUnverified(ctx, 10_000)
				if err != nil {
					b.Fatal(err)
				}
				if len(ids) != int(wantBlocking/5) {
					b.Fatalf("%d unverified-only", len(ids))
				}
			}
		})
		b.Run("complete", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				completeBlocked(b, s, wantBlocking)
			}
			reportRSS(b)
		})
		// The notes after a repeated decision: nothing changed, nothing
		// to write, but the ready sessions are read to know it.
		b.Run("note-again", func(b *testing.B) {
			if _, err := s.NoteDrainBlocked(ctx, "drn_bench"); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if n, err := s.NoteDrainBlocked(ctx, "drn_bench"); err != nil || n != 0 {
					b.Fatalf("noted %d, %v; want none", n, err)
				}
			}
		})
		// The first notes of a drain: an event in every active session's
		// log (5k with reasons, 95k ready). Last: it rewrites 100k rows
		// per iteration, bloating what the others read.
		b.Run("note-blocked", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				if _, err := db.ExecContext(ctx, `UPDATE sessions SET drain_noted_at = NULL WHERE drain_noted_at IS NOT NULL`); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if n, err := s.NoteDrainBlocked(ctx, "drn_bench"); err != nil || n != active {
					b.Fatalf("noted %d, %v; want %d", n, err, active)
				}
			}
			reportRSS(b)
		})
	})
}

func completeBlocked(b *testing.B, s *store.Store, wantBlocking int64) {
	d, err := s.CompleteDrain(b.Context(), store.DrainCompletion{By: "bench", Limit: 50})
	if err != nil {
		b.Fatal(err)
	}
	if d.Decision.Outcome != checkpointd.DrainOutcomeBlocked || d.Decision.Counts.Blocking != wantBlocking {
		b.Fatalf("decision %+v", d.Decision.Counts)
	}
}

// reportRSS reports the process's peak resident set (VmHWM) in MB.
func reportRSS(b *testing.B) {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			b.ReportMetric(float64(kb)/1024, "peak-rss-MB")
		}
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	b.ReportMetric(float64(m.HeapInuse)/(1<<20), "heap-inuse-MB")
}

// BenchmarkDrainCompletion measures the completing decision over 100k
// active sessions, all ready, once before a restart: "vouched" after the
// drain's pass read back every latest checkpoint (the completion counts
// again under the readiness lock and keeps its cut), "unvouched" with no
// pass before it (it reads back all 100k itself); then the pass itself
// (vouch) and the notes of a 100k cut (note), both in the background.
func BenchmarkDrainCompletion(b *testing.B) {
	active, _ := drainBenchSize(b)
	eachBackend(b, func(b *testing.B, be storetest.Backend) {
		url := storetest.URL(b, be)
		s := seedDrainURL(b, be, url, active, 1<<40, false)
		db := openRaw(b, be, url)
		exec := func(q string) {
			b.Helper()
			if _, err := db.ExecContext(b.Context(), q); err != nil {
				b.Fatal(err)
			}
		}
		reopen := func() { exec(`UPDATE drains SET state = 'running', is_open = 1, ended_at = NULL, decision = ''`) }
		for _, vouched := range []bool{false, true} {
			b.Run(map[bool]string{false: "unvouched", true: "vouched"}[vouched], func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					b.StopTimer()
					reopen()
					if !vouched {
						exec(`DELETE FROM drain_vouches`)
					} else if _, err := s.VouchReady(b.Context()); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					d, err := s.CompleteDrain(b.Context(), store.DrainCompletion{By: "bench", Limit: 50})
					if err != nil {
						b.Fatal(err)
					}
					if d.State != checkpointd.DrainCompleted || d.Decision.Counts.Active != int64(active) {
						b.Fatalf("completion %+v %+v", d.State, d.Decision.Counts)
					}
				}
				reportRSS(b)
			})
		}
		b.Run("vouch", func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				reopen()
				exec(`DELETE FROM drain_vouches`)
				b.StartTimer()
				if n, err := s.VouchReady(b.Context()); err != nil || n != active {
					b.Fatalf("VouchReady: %d, %v", n, err)
				}
			}
		})
		b.Run("note", func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				reopen()
				if _, err := s.CompleteDrain(b.Context(), store.DrainCompletion{By: "bench", Limit: 50}); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if n, err := s.NoteDrainCompleted(b.Context()); err != nil || n != active {
					b.Fatalf("NoteDrainCompleted: %d, %v", n, err)
				}
			}
		})
	})
}

// BenchmarkDrainStart measures starting a drain over 100k active sessions,
// all ready for the previous one (start: one row, no session touched), and
// the reset pass that then moves all 100k into the blocking index (reset:
// in chunks of its own transactions, in the background); then, with every
// session blocking, the status and a blocked decision.
func BenchmarkDrainStart(b *testing.B) {
	active, _ := drainBenchSize(b)
	eachBackend(b, func(b *testing.B, be storetest.Backend) {
		url := storetest.URL(b, be)
		s := seedDrainURL(b, be, url, active, 1<<40, false)
		db := openRaw(b, be, url)
		ready := func(b *testing.B) {
			for _, q := range []string{`UPDATE drains SET is_open = NULL, state = 'cancelled'`, `UPDATE sessions SET drain_ready = TRUE`} {
				if _, err := db.ExecContext(b.Context(), q); err != nil {
					b.Fatal(err)
				}
			}
		}
		start := func(b *testing.B) {
			if _, started, err := s.StartDrain(b.Context(), "bench", "bench"); err != nil || !started {
				b.Fatal(started, err)
			}
		}
		b.Run("start", func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				ready(b)
				b.StartTimer()
				start(b)
			}
		})
		b.Run("reset", func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				ready(b)
				start(b)
				b.StartTimer()
				if n, err := s.ResetWrittenBefore(b.Context()); err != nil || n != active {
					b.Fatalf("reset %d of %d: %v", n, active, err)
				}
			}
			reportRSS(b)
		})
		// The rest of such a drain, every session blocking until it
		// writes: the status (GET /v1/drain) and a blocked decision.
		reset := func(b *testing.B) {
			ready(b)
			start(b)
			if n, err := s.ResetWrittenBefore(b.Context()); err != nil || n != active {
				b.Fatalf("reset %d of %d: %v", n, active, err)
			}
		}
		b.Run("status-after-reset", func(b *testing.B) {
			reset(b)
			for b.Loop() {
				st, err := s.DrainStatus(b.Context(), store.DrainQuery{Limit: 50})
				if err != nil {
					b.Fatal(err)
				}
				if st.Counts.Blocking != int64(active) || len(st.Blocking) != 50 {
					b.Fatalf("counts %+v, %d listed", st.Counts, len(st.Blocking))
				}
			}
		})
		b.Run("complete-after-reset", func(b *testing.B) {
			reset(b)
			for b.Loop() {
				completeBlocked(b, s, int64(active))
			}
		})
	})
}
