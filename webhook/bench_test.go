package webhook

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// benchActive is how many active sessions the store holds while a push
// fans out; the scale.
const benchActive = 100_000

// BenchmarkPushInvalidation measures a whole push delivery through
// Handler.ServeHTTP (verify, parse, record the live ref and count the
// sessions it moves, commit, answer; then re-judge and update the bound
// sessions) with benchActive active sessions, of which `affected` are on
// the pushed branch. Successive deliveries alternate the branch
// between two heads, so every one flips all affected sessions valid↔stale.
//
// The affected sessions are spread through the table, as sessions of one
// branch created among others over time are; ",clustered" puts them in
// adjacent rows, as a fan-out created at once would, which the engines
// update with far fewer pages. The redelivery case resends one delivery id:
// the cost of a no-op. p50-ms and p99-ms are the server time to the answer
// (what the forge waits for), p50-settle-ms and p99-settle-ms the time the
// handler then spends updating the sessions; each delivery is checked to
// have left every affected session settled. They are measured after one
// untimed round trip; first-ms is that first delivery's answer. Seeding is not
// timed. docs/performance.md has the targets and the numbers.
//
//	go test ./webhook -run '^$' -bench PushInvalidation -benchtime 50x
func BenchmarkPushInvalidation(b *testing.B) {
	for _, be := range []storetest.Backend{storetest.SQLite, storetest.Postgres} {
		b.Run(string(be), func(b *testing.B) {
			if be == storetest.Postgres {
				storetest.RequirePostgres(b)
			}
			for _, l := range []layout{{100, false}, {1000, false}, {100, true}, {1000, true}} {
				b.Run(l.String(), func(b *testing.B) {
					benchPushes(b, newPushBench(b, be, l), l.affected)
				})
			}
			b.Run("redelivery", func(b *testing.B) {
				benchRedelivery(b, newPushBench(b, be, layout{affected: 1000}))
			})
		})
	}
}

// layout says how many sessions are on the pushed branch and whether their
// rows are adjacent.
type layout struct {
	affected  int
	clustered bool
}

func (l layout) String() string {
	s := fmt.Sprintf("affected=%d", l.affected)
	if l.clustered {
		s += ",clustered"
	}
	return s
}

func benchPushes(b *testing.B, pb *pushBench, affected int) {
	// A round trip before timing: a running daemon's pooled connections are
	// warm, and the first delivery on a new one also fills its caches. Its
	// time is reported on its own as first-ms.
	first := pb.serve(b, pb.request(uuid.NewString(), 0), map[string]int{"stale": affected}, false)
	pb.serve(b, pb.request(uuid.NewString(), 1), map[string]int{"valid": affected}, false)
	var lat []timing
	for i := 0; b.Loop(); i++ {
		// Even deliveries move the branch off the sessions' head (stale),
		// odd ones back onto it (valid); each continues the previous one.
		want := map[string]int{"stale": affected}
		if i%2 == 1 {
			want = map[string]int{"valid": affected}
		}
		r := pb.request(uuid.NewString(), i%2)
		lat = append(lat, pb.serve(b, r, want, false))
	}
	reportLatency(b, lat)
	b.ReportMetric(ms(first.answer), "first-ms")
	pb.checkUntouched(b)
}

func benchRedelivery(b *testing.B, pb *pushBench) {
	id := uuid.NewString()
	pb.serve(b, pb.request(id, 0), map[string]int{"stale": 1000}, false)
	var lat []timing
	for b.Loop() {
		lat = append(lat, pb.serve(b, pb.request(id, 0), nil, true))
	}
	reportLatency(b, lat)
	pb.checkUntouched(b)
}

// pushBench is a handler over a store seeded with benchActive sessions and
// the two signed variants of the fast-forward push to operator/demo
// feature/alpha: bodies[0] as captured (before → after), bodies[1] back.
type pushBench struct {
	pg      bool
	handler *Handler
	seed    *sql.DB
	headers map[string]string
	bodies  [2]string
	sigs    [2][2]string // per body: hex HMAC-SHA256, hex HMAC-SHA1
}

func newPushBench(b *testing.B, be storetest.Backend, l layout) *pushBench {
	b.Helper()
	f := loadFixture(b, "gitea/09-push-fast-forward.json")
	var p struct{ Before, After string }
	if err := json.Unmarshal([]byte(f.Body), &p); err != nil {
		b.Fatal(err)
	}
	swap := strings.NewReplacer(`"before": "`+p.Before+`"`, `"before": "`+p.After+`"`,
		`"after": "`+p.After+`"`, `"after": "`+p.Before+`"`)
	pb := &pushBench{pg: be == storetest.Postgres, headers: f.Headers, bodies: [2]string{f.Body, swap.Replace(f.Body)}}
	if pb.bodies[1] == pb.bodies[0] {
		b.Fatal("fixture: before/after not found in the body")
	}
	for i, body := range pb.bodies {
		pb.sigs[i] = [2]string{hmacHex(sha256.New, f.Secret, body), hmacHex(sha1.New, f.Secret, body)}
	}

	u := storetest.URL(b, be)
	s := storetest.OpenURL(b, u, checkpointd.SystemClock{})
	pb.handler = &Handler{Verifier: &Verifier{Secrets: [][]byte{[]byte(f.Secret)}}, Store: s,
		Log: slog.New(slog.DiscardHandler)}
	driver, dsn := "postgres", u
	if be == storetest.SQLite {
		driver, dsn = "sqlite", "file:"+(&url.URL{Path: u}).EscapedPath()+"?_pragma=busy_timeout(5000)"
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	pb.seed = db
	start := time.Now()
	seedSessions(b, s, db, be, l, p.Before)
	b.Logf("seeded %d active sessions (%v) in %v", benchActive, l, time.Since(start).Round(time.Millisecond))
	runtime.GC() // the seed's garbage is not the handler's
	return pb
}

func hmacHex(h func() hash.Hash, secret, body string) string {
	m := hmac.New(h, []byte(secret))
	m.Write([]byte(body))
	return hex.EncodeToString(m.Sum(nil))
}

// request is delivery id carrying body variant v, signed as Gitea signs.
func (pb *pushBench) request(id string, v int) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/webhooks/gitea", strings.NewReader(pb.bodies[v]))
	for k, val := range pb.headers {
		if k == "Host" {
			r.Host = val
			continue
		}
		r.Header.Set(k, val)
	}
	for _, h := range []string{"X-Gitea-Delivery", "X-Gogs-Delivery", "X-GitHub-Delivery"} {
		r.Header.Set(h, id)
	}
	r.Header.Set("X-Gitea-Signature", pb.sigs[v][0])
	r.Header.Set("X-Gogs-Signature", pb.sigs[v][0])
	r.Header.Set("X-Hub-Signature-256", "sha256="+pb.sigs[v][0])
	r.Header.Set("X-Hub-Signature", "sha1="+pb.sigs[v][1])
	return r
}

// answerRecorder notes when the handler flushed its answer: what the forge
// waits for. The handler settles the sessions after it.
type answerRecorder struct {
	*httptest.ResponseRecorder
	answered time.Time
}

func (a *answerRecorder) Flush() {
	if a.answered.IsZero() {
		a.answered = time.Now()
	}
	a.ResponseRecorder.Flush()
}

// timing is one delivery's server time to its answer, and the time the
// handler then spent settling the sessions.
type timing struct{ answer, settle time.Duration }

// serve delivers r, checks the answer moved exactly the sessions in want (or
// was a duplicate) and that the sessions are settled when the handler
// returns, and returns the server times.
func (pb *pushBench) serve(b *testing.B, r *http.Request, want map[string]int, dup bool) timing {
	rec := &answerRecorder{ResponseRecorder: httptest.NewRecorder()}
	start := time.Now()
	pb.handler.ServeHTTP(rec, r)
	end := time.Now()
	if rec.answered.IsZero() {
		rec.answered = end
	}
	t := timing{answer: rec.answered.Sub(start), settle: end.Sub(rec.answered)}
	var got struct {
		Duplicate bool
		Effects   *checkpointd.ObservationEffects
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != http.StatusOK {
		b.Fatalf("delivery: %d %s (%v)", rec.Code, rec.Body, err)
	}
	if dup {
		if !got.Duplicate || got.Effects != nil {
			b.Fatalf("redelivery was not a no-op: %s", rec.Body)
		}
		return t
	}
	if got.Effects == nil || got.Effects.Ambiguous != 0 || !maps.Equal(got.Effects.Sessions, want) {
		b.Fatalf("delivery effects %s, want sessions %v", rec.Body, want)
	}
	for validity, n := range want {
		var settled int
		err := pb.seed.QueryRowContext(b.Context(), pb.rebind(`SELECT COUNT(*) FROM sessions
WHERE repo_key = 'operator/demo' AND branch = 'feature/alpha' AND validity = ?`), validity).Scan(&settled)
		if err != nil || settled != n {
			b.Fatalf("after the delivery %d sessions are %s, want %d (%v)", settled, validity, n, err)
		}
	}
	return t
}

func (pb *pushBench) rebind(q string) string {
	if pb.pg {
		return strings.Replace(q, "?", "$1", 1)
	}
	return q
}

// checkUntouched fails when a delivery changed a session off the pushed
// branch: the fan-out must select by ref, not scan.
func (pb *pushBench) checkUntouched(b *testing.B) {
	var n int
	err := pb.seed.QueryRowContext(b.Context(), `SELECT COUNT(*) FROM sessions
WHERE validity <> 'valid' AND NOT (repo_key = 'operator/demo' AND branch = 'feature/alpha') AND repo_key <> 'bench/template'`).Scan(&n)
	if err != nil {
		b.Fatal(err)
	}
	if n != 0 {
		b.Fatalf("%d sessions off the pushed branch changed validity", n)
	}
}

// reportLatency reports the nearest-rank p50 and p99 of the server times to
// the answer, and of the settling after it.
func reportLatency(b *testing.B, lat []timing) {
	if len(lat) == 0 {
		return
	}
	report := func(d []time.Duration, unit string) {
		slices.Sort(d)
		rank := func(p float64) time.Duration { return d[max(0, int(math.Ceil(float64(len(d))*p))-1)] }
		b.ReportMetric(ms(rank(0.50)), "p50-"+unit)
		b.ReportMetric(ms(rank(0.99)), "p99-"+unit)
	}
	answers, settles := make([]time.Duration, len(lat)), make([]time.Duration, len(lat))
	for i, t := range lat {
		answers[i], settles[i] = t.answer, t.settle
	}
	report(answers, "ms")
	report(settles, "settle-ms")
	b.ReportMetric(ms(slices.Max(answers)), "max-ms")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// seedSessions fills the store with benchActive active sessions in one
// transaction of multi-row INSERTs. The row shape is copied from a session
// CreateSession made, so columns added later keep their real defaults.
// l.affected sessions are on operator/demo feature/alpha at head, spread
// evenly through the table or (l.clustered) in its first rows. The rest are
// on other branches of operator/demo (one in ten) or on the same branch name
// in 500 other repos, so neither half of the (repo_key, branch) key alone
// finds them. All are valid with their leases held, and drain-ready as after
// a complete checkpoint.
func seedSessions(b *testing.B, s *store.Store, db *sql.DB, be storetest.Backend, l layout, head string) {
	b.Helper()
	ctx := b.Context()
	tmpl, err := s.CreateSession(ctx, store.NewSession{Repo: "bench/template", Role: "author", Branch: "main",
		Agent: checkpointd.Agent{Runtime: "bench", Instance: "seed"}})
	if err != nil {
		b.Fatal(err)
	}
	sCols, sVals := rowOf(b, db, be, "sessions", "id", tmpl.ID)
	rCols, rVals := rowOf(b, db, be, "runs", "id", tmpl.CurrentRun.ID)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Rollback()
	sessions := newBulk(be, "sessions", sCols, sVals)
	runs := newBulk(be, "runs", rCols, rVals)
	for i := 1; i < benchActive; i++ { // the template is one of them
		sid, rid := fmt.Sprintf("ses_bench%08d", i), fmt.Sprintf("run_bench%08d", i)
		repo, branch, h := "operator/demo", "feature/alpha", head
		switch {
		case l.clustered && i <= l.affected, !l.clustered && (i-1)%(benchActive/l.affected) == 0:
		case i%10 == 0:
			branch, h = fmt.Sprintf("feature/b%d", i%997), fmt.Sprintf("%040x", i)
		default:
			repo, h = fmt.Sprintf("org%d/repo%d", i%500, i%500), fmt.Sprintf("%040x", i)
		}
		sessions.add(map[string]any{"id": sid, "repo": repo, "repo_key": repo, "branch": branch,
			"current_run_id": rid, "head": h, "validity": "valid", "validity_reason": "", "leases_ok": true,
			"drain_ready": true, "latest_complete": true})
		runs.add(map[string]any{"id": rid, "session_id": sid})
		if i == benchActive-1 || sessions.full() || runs.full() {
			// Sessions first: runs reference them.
			if err := sessions.flush(ctx, tx); err != nil {
				b.Fatal(err)
			}
			if err := runs.flush(ctx, tx); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	if be == storetest.Postgres {
		// What autovacuum does to a table that grew this much; without it
		// the first deliveries would race the daemon's analyze.
		if _, err := db.ExecContext(ctx, `ANALYZE sessions; ANALYZE runs`); err != nil {
			b.Fatal(err)
		}
	}
}

// rowOf reads one row of table as column names and values.
func rowOf(b *testing.B, db *sql.DB, be storetest.Backend, table, key, id string) ([]string, []any) {
	b.Helper()
	q := "SELECT * FROM " + table + " WHERE " + key + " = ?"
	if be == storetest.Postgres {
		q = strings.Replace(q, "?", "$1", 1)
	}
	rows, err := db.QueryContext(b.Context(), q, id)
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		b.Fatal(err)
	}
	if !rows.Next() {
		b.Fatalf("%s %s: not found (%v)", table, id, rows.Err())
	}
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		b.Fatal(err)
	}
	return cols, vals
}

// bulk buffers rows of one table and inserts them many per statement, under
// both engines' bound-parameter limits.
type bulk struct {
	pg     bool
	prefix string
	cols   []string
	tmpl   []any
	per    int
	args   []any
	n      int
}

func newBulk(be storetest.Backend, table string, cols []string, tmpl []any) *bulk {
	return &bulk{pg: be == storetest.Postgres, cols: cols, tmpl: tmpl, per: 30000 / len(cols),
		prefix: "INSERT INTO " + table + " (" + strings.Join(cols, ", ") + ") VALUES "}
}

// add buffers the template row with set's columns replaced.
func (k *bulk) add(set map[string]any) {
	for i, c := range k.cols {
		v, ok := set[c]
		if !ok {
			v = k.tmpl[i]
		}
		k.args = append(k.args, v)
	}
	k.n++
}

// full reports whether another row would pass the parameter limit.
func (k *bulk) full() bool { return k.n >= k.per }

func (k *bulk) flush(ctx context.Context, tx *sql.Tx) error {
	if k.n == 0 {
		return nil
	}
	var q strings.Builder
	q.WriteString(k.prefix)
	p := 0
	for r := range k.n {
		if r > 0 {
			q.WriteString(", ")
		}
		q.WriteByte('(')
		for c := range k.cols {
			if c > 0 {
				q.WriteString(", ")
			}
			p++
			if k.pg {
				fmt.Fprintf(&q, "$%d", p)
			} else {
				q.WriteByte('?')
			}
		}
		q.WriteByte(')')
	}
	_, err := tx.ExecContext(ctx, q.String(), k.args...)
	k.args, k.n = k.args[:0], 0
	return err
}
