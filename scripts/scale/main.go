// Command scale measures what grows with the number of sessions
// (docs/performance.md, "At scale"):
//
//	go run ./scripts/scale -backend sqlite -n 1000,10000,100000
//	go run ./scripts/scale -backend postgres -n 1000,10000,100000 \
//	    -pg 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
//
// For each N it starts the daemon (built once) on a fresh database, writes
// -templates sessions with -checkpoints checkpoints each through the HTTP
// API, stops it and clones those rows in SQL up to N sessions (ids, runs
// and repos of their own: one session in 1000 on the repo rare/one, the
// others over 100 repos), starts the daemon again (the boot, with its
// reconcile, is timed) and times each request -reps times, printing the
// median. The daemon reconciles against a fake Gitea (reconcile/forgetest)
// serving every session's branch at its head, so the boot pass asks about
// each distinct ref, as against a real forge. Everything is on loopback;
// the PostgreSQL database checkpointd_scale is created and dropped on the
// server of -pg.
//
// Each cloned checkpoint's free text is sealed again for its own row with
// the key file in the data directory, so the clones read back as the
// daemon's own (one is read through the API after the boot to be sure).
package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "github.com/lib/pq"
	_ "modernc.org/sqlite"

	"github.com/checkpointd/checkpointd/reconcile/forgetest"
)

func main() {
	backend := flag.String("backend", "sqlite", "sqlite or postgres")
	sizes := flag.String("n", "1000,10000", "session counts, comma-separated")
	pg := flag.String("pg", os.Getenv("CHECKPOINTD_TEST_DATABASE_URL"), "a PostgreSQL URL whose server the scratch database is made on")
	templates := flag.Int("templates", 20, "sessions written through the API, then cloned")
	checkpoints := flag.Int("checkpoints", 10, "checkpoints per session")
	reps := flag.Int("reps", 15, "times each request is timed")
	flag.Parse()
	if *backend != "sqlite" && *backend != "postgres" {
		fail(fmt.Errorf("-backend must be sqlite or postgres"))
	}
	if *backend == "postgres" && *pg == "" {
		fail(fmt.Errorf("-pg (or CHECKPOINTD_TEST_DATABASE_URL) is needed for -backend postgres"))
	}
	var ns []int
	for _, f := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < *templates {
			fail(fmt.Errorf("-n: %q is no count of at least -templates (%d)", f, *templates))
		}
		ns = append(ns, n)
	}
	work, err := os.MkdirTemp("", "checkpointd-scale-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(work)
	bin := filepath.Join(work, "checkpointd")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/checkpointd").CombinedOutput(); err != nil {
		fail(fmt.Errorf("go build: %v\n%s", err, out))
	}
	results := map[int]map[string]float64{}
	for _, n := range ns {
		r := &run{bin: bin, backend: *backend, pg: *pg, dir: filepath.Join(work, strconv.Itoa(n)), n: n,
			templates: *templates, checkpoints: *checkpoints, reps: *reps, times: map[string]float64{}}
		if err := r.measure(context.Background()); err != nil {
			r.stop()
			fail(fmt.Errorf("n=%d: %w", n, err))
		}
		results[n] = r.times
	}
	printTable(os.Stdout, *backend, ns, results)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "scale:", err)
	os.Exit(1)
}

// The measurements, in the order of the table.
var measured = []string{
	"boot to ready (s)",
	"boot reconcile refs (count)",
	"boot reconcile pass",
	"boot reconcile refs deferred (count)",
	"GET /v1/fleet",
	"GET /v1/sessions?limit=50",
	"GET /v1/sessions?repo=rare/*",
	"GET /v1/sessions?stage=testing",
	"GET /v1/drain (none)",
	"GET /ui/",
	"GET /metrics",
	"POST /v1/drain",
	"GET /v1/drain (running)",
	"GET /v1/drain (running, reset)",
	"GET /v1/drain (running, reset, vacuumed)",
	"POST /v1/drain/complete (blocked)",
	"POST /v1/drain/cancel",
	"POST checkpoint",
	"HOT updates of sessions (%)",
}

// run is one N on one backend.
type run struct {
	bin, backend, pg, dir string
	n, templates          int
	checkpoints, reps     int
	times                 map[string]float64 // ms, boot in s

	dbURL    string // PostgreSQL
	base     string
	daemon   *exec.Cmd
	operator string
	agent    string
	cookie   *http.Cookie
	sample   struct{ id, run string }
	forge    *forgetest.Server
	forgeTB  *scriptTB
}

func (r *run) measure(ctx context.Context) error {
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		return err
	}
	if r.backend == "postgres" {
		u, err := scratchDatabase(r.pg)
		if err != nil {
			return err
		}
		r.dbURL = u
		defer dropScratch(r.pg)
	}
	r.startForge()
	defer r.stopForge()
	if _, err := r.start(); err != nil {
		return err
	}
	if err := r.writeTemplates(ctx); err != nil {
		return err
	}
	r.stop()
	start := time.Now()
	if err := r.clone(ctx); err != nil {
		return fmt.Errorf("clone: %w", err)
	}
	fmt.Fprintf(os.Stderr, "scale: %s n=%d filled in %s\n", r.backend, r.n, time.Since(start).Round(time.Second))
	refs, err := r.serveRefs(ctx)
	if err != nil {
		return fmt.Errorf("serving the refs: %w", err)
	}
	r.times["boot reconcile refs (count)"] = float64(refs)
	booted := time.Now()
	boot, err := r.start()
	if err != nil {
		return err
	}
	defer r.stop()
	r.times["boot to ready (s)"] = boot.Seconds() * 1000
	if err := r.signIn(); err != nil {
		return err
	}
	if r.times["boot reconcile pass"], err = r.bootPass(refs, booted); err != nil {
		return err
	}
	if err := r.readClone(ctx); err != nil {
		return err
	}
	gets := map[string]string{
		"GET /v1/fleet":                  "/v1/fleet",
		"GET /v1/sessions?limit=50":      "/v1/sessions?limit=50",
		"GET /v1/sessions?repo=rare/*":   "/v1/sessions?limit=50&repo=rare/*",
		"GET /v1/sessions?stage=testing": "/v1/sessions?limit=50&stage=testing",
		"GET /v1/drain (none)":           "/v1/drain",
		"GET /ui/":                       "/ui/",
		"GET /metrics":                   "/metrics",
	}
	for _, name := range measured {
		if path, ok := gets[name]; ok {
			if err := r.time(name, func() error { return r.get(path) }); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	// A drain cycle per rep: start, status, a completion the sessions
	// block (nothing was written since the start), cancel.
	var cycle []map[string]float64
	for range max(r.reps/3, 3) {
		// As after a drain every session wrote for: every one ready, so
		// the start finds them all written before it. In chunks: one
		// statement over 100k rows races the daemon's background passes
		// into deadlocks it does not get out of.
		if err := r.readyAll(); err != nil {
			return err
		}
		analyzed := r.analyses()
		t := map[string]float64{}
		steps := []struct {
			name string
			do   func() error
		}{
			{"POST /v1/drain", func() error { return r.post("/v1/drain", `{"reason":"scale"}`, http.StatusCreated, http.StatusOK) }},
			{"GET /v1/drain (running)", func() error { return r.get("/v1/drain") }},
			{"POST /v1/drain/complete (blocked)", func() error { return r.post("/v1/drain/complete", `{}`, http.StatusConflict) }},
			{"POST /v1/drain/cancel", func() error { return r.post("/v1/drain/cancel", `{}`, http.StatusOK) }},
		}
		for i, s := range steps {
			began := time.Now()
			if err := s.do(); err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			t[s.name] = ms(time.Since(began))
			if i == 0 {
				// The status again once the reset pass is through (a
				// build with one), as it stays for the rest of the drain.
				r.awaitReset(analyzed)
				began := time.Now()
				if err := r.get("/v1/drain"); err != nil {
					return err
				}
				t["GET /v1/drain (running, reset)"] = ms(time.Since(began))
				// And once autovacuum would have been through the 100k
				// versions the reset pass left (within its minute's
				// nap, at its defaults), as for the rest of the drain.
				if r.backend == "postgres" {
					if err := r.vacuum(); err != nil {
						return err
					}
					began = time.Now()
					if err := r.get("/v1/drain"); err != nil {
						return err
					}
					t["GET /v1/drain (running, reset, vacuumed)"] = ms(time.Since(began))
				}
			}
		}
		cycle = append(cycle, t)
	}
	for name := range cycle[0] {
		var xs []float64
		for _, t := range cycle {
			xs = append(xs, t[name])
		}
		r.times[name] = median(xs)
	}
	// Writes of one stage, as an agent's between two stage changes.
	seq, before := r.checkpoints, r.hotUpdates()
	err = r.time("POST checkpoint", func() error {
		seq += len(stages)
		return r.postAs(r.agent, "/v1/sessions/"+r.sample.id+"/checkpoints", document(r.sample.run, 0, seq), http.StatusCreated)
	})
	if after := r.hotUpdates(); r.backend == "postgres" && after[0] > before[0] {
		r.times["HOT updates of sessions (%)"] = 100 * float64(after[1]-before[1]) / float64(after[0]-before[0])
	}
	return err
}

// readClone reads the latest checkpoint of the last clone through the
// API: the clones must read back as the daemon's own, or the drain
// measured here is not the one a real fleet sees.
func (r *run) readClone(ctx context.Context) error {
	db, err := r.open()
	if err != nil {
		return err
	}
	defer db.Close()
	var id string
	if err := db.QueryRowContext(ctx, `SELECT id FROM sessions WHERE state = 'active' ORDER BY id LIMIT 1`).Scan(&id); err != nil {
		return err
	}
	if err := r.get("/v1/sessions/" + id + "/checkpoints/latest"); err != nil {
		return fmt.Errorf("a cloned checkpoint does not read back: %w", err)
	}
	return nil
}

// bootPass waits for the reconcile pass of the boot at booted (not the
// template run's) and returns its duration in ms, as its report says; it
// fails unless the pass had every ref and asked the forge about each it
// did not defer (their number is a row of the table).
func (r *run) bootPass(refs int, booted time.Time) (float64, error) {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var last struct {
			Report *struct {
				Trigger    string    `json:"trigger"`
				StartedAt  time.Time `json:"started_at"`
				DurationMS int64     `json:"duration_ms"`
				Refs       int       `json:"refs"`
				Unverified int       `json:"refs_unverified"`
				Deferred   int       `json:"refs_deferred"`
				Error      string    `json:"error"`
				ForgeCalls int       `json:"forge_calls"`
			} `json:"report"`
		}
		if err := r.call(r.operator, http.MethodGet, "/v1/reconcile/last", "", &last, http.StatusOK); err != nil {
			return 0, err
		}
		if rep := last.Report; rep != nil && rep.Trigger == "boot" && !rep.StartedAt.Before(booted.Truncate(time.Second)) {
			if rep.Refs != refs || rep.Unverified != 0 || rep.ForgeCalls < refs-rep.Deferred {
				return 0, fmt.Errorf("the boot reconcile had %d refs (%d unverified, %d deferred) in %d forge calls; the forge serves %d",
					rep.Refs, rep.Unverified, rep.Deferred, rep.ForgeCalls, refs)
			}
			if rep.Error != "" {
				fmt.Fprintf(os.Stderr, "scale: n=%d: the boot reconcile pass says: %s\n", r.n, rep.Error)
			}
			r.times["boot reconcile refs deferred (count)"] = float64(rep.Deferred)
			return float64(rep.DurationMS), nil
		}
		if time.Now().After(deadline) {
			return 0, errors.New("no boot reconcile pass within 5 minutes")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// awaitReset waits (at most 3 minutes) until no session is left that the
// drain's reset pass has to reset; a build without one (no
// checkpoint_epoch column) returns at once. On PostgreSQL it then waits
// (at most 15 s: a build that does not analyze) for the pass's analysis
// of sessions: one more than analyzed, the count before the start.
func (r *run) awaitReset(analyzed int64) {
	db, err := r.open()
	if err != nil {
		return
	}
	defer db.Close()
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var n int
		if err := db.QueryRow(`SELECT COUNT(*) FROM sessions WHERE state = 'active' AND drain_ready AND current_run_id <> ''
AND checkpoint_epoch < (SELECT MAX(epoch) FROM drains)`).Scan(&n); err != nil || n == 0 {
			break
		}
	}
	for deadline := time.Now().Add(15 * time.Second); r.backend == "postgres" && time.Now().Before(deadline) && r.analyses() <= analyzed; {
		time.Sleep(100 * time.Millisecond)
	}
}

// analyses is how many times PostgreSQL analyzed sessions (0 on SQLite).
func (r *run) analyses() int64 {
	var n int64
	r.sessionStats(`analyze_count + autoanalyze_count`, &n)
	return n
}

// sessionStats reads columns of PostgreSQL's statistics of the sessions
// table into dest (left as they are on SQLite or on failure).
func (r *run) sessionStats(columns string, dest ...any) {
	if r.backend != "postgres" {
		return
	}
	db, err := r.open()
	if err != nil {
		return
	}
	defer db.Close()
	db.QueryRow(`SELECT ` + columns + ` FROM pg_stat_user_tables WHERE relname = 'sessions'`).Scan(dest...)
}

// readyAll sets drain_ready on every active session with a run, 2000 at
// a time, and on PostgreSQL vacuums what that left behind.
func (r *run) readyAll() error {
	db, err := r.open()
	if err != nil {
		return err
	}
	defer db.Close()
	for {
		var n int64
		for try := 0; ; try++ {
			res, err := db.Exec(`UPDATE sessions SET drain_ready = TRUE WHERE id IN (SELECT id FROM sessions
WHERE state = 'active' AND current_run_id <> '' AND NOT drain_ready ORDER BY id LIMIT 2000)`)
			if err == nil {
				n, _ = res.RowsAffected()
				break
			}
			if try == 10 || !strings.Contains(err.Error(), "deadlock detected") {
				return err
			}
			time.Sleep(100 * time.Millisecond)
		}
		if n == 0 {
			break
		}
	}
	if r.backend != "postgres" {
		return nil
	}
	return r.vacuum()
}

// vacuum does on PostgreSQL what autovacuum does after a bulk change on a
// server with it on (the script's may have it off): 100k session rows
// rewritten, and twice as many row versions written to the counts kept by
// trigger.
func (r *run) vacuum() error {
	db, err := r.open()
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.Exec(`VACUUM ANALYZE sessions, session_counts`)
	return err
}

// hotUpdates is PostgreSQL's count of the updates of sessions and of the
// HOT ones among them (zeros on SQLite). An idle backend's statistics
// reach the server within 10 s (PGSTAT_IDLE_INTERVAL): it waits that long
// first.
func (r *run) hotUpdates() [2]int64 {
	var n [2]int64
	if r.backend != "postgres" {
		return n
	}
	time.Sleep(11 * time.Second)
	r.sessionStats(`n_tup_upd, n_tup_hot_upd`, &n[0], &n[1])
	return n
}

// time runs do reps times (after one untimed warm-up) and keeps the median.
func (r *run) time(name string, do func() error) error {
	if err := do(); err != nil {
		return err
	}
	var xs []float64
	for range r.reps {
		began := time.Now()
		if err := do(); err != nil {
			return err
		}
		xs = append(xs, ms(time.Since(began)))
	}
	r.times[name] = median(xs)
	return nil
}

// start runs the daemon and waits until it is ready; it returns how long
// that took.
func (r *run) start() (time.Duration, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	addr := ln.Addr().String()
	ln.Close()
	r.base = "http://" + addr
	// The clones' runs were last heard when their templates wrote, minutes
	// before a 100k fill ends: with the default window they would all read
	// as unresponsive (and be marked so, 100k rows at once), where a
	// working fleet's runs are heard within it.
	// The interval's reconcile passes are left out (every 24 h): one
	// asks the forge about every ref again, which would run beside the
	// timed requests; the boot's pass is timed on its own, at a forge
	// rate that does not bind (the daemon's own cost per ref; at the
	// default 50 a second the forge's budget is what a pass waits for).
	args := []string{"serve", "--listen", addr, "--data-dir", r.dir, "--log-level", "warn", "--run-liveness", "24h",
		"--gitea-url", r.forge.URL, "--gitea-rate", "1000000", "--reconcile-interval", "24h"}
	if r.dbURL != "" {
		args = append(args, "--database-url", r.dbURL)
	}
	logf, err := os.OpenFile(filepath.Join(r.dir, "daemon.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, err
	}
	r.daemon = exec.Command(r.bin, args...)
	r.daemon.Env = append(os.Environ(), "CHECKPOINTD_GITEA_TOKEN="+forgeToken)
	r.daemon.Stdout, r.daemon.Stderr = logf, logf
	began := time.Now()
	if err := r.daemon.Start(); err != nil {
		return 0, err
	}
	for deadline := time.Now().Add(10 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get(r.base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				took := time.Since(began)
				tok, err := os.ReadFile(filepath.Join(r.dir, "operator.token"))
				r.operator = strings.TrimSpace(string(tok))
				return took, err
			}
		}
		if r.daemon.ProcessState != nil {
			break
		}
	}
	return 0, fmt.Errorf("the daemon did not become ready (see %s)", filepath.Join(r.dir, "daemon.log"))
}

func (r *run) stop() {
	if r.daemon == nil || r.daemon.Process == nil {
		return
	}
	r.daemon.Process.Signal(syscall.SIGTERM)
	r.daemon.Wait()
	r.daemon = nil
}

// writeTemplates writes the sessions the fill clones, through the API.
func (r *run) writeTemplates(ctx context.Context) error {
	var tok struct {
		Secret string `json:"secret"`
	}
	if err := r.call(r.operator, http.MethodPost, "/v1/tokens",
		`{"name":"scale-agent","role":"agent","scopes":["*"]}`, &tok, http.StatusCreated); err != nil {
		return fmt.Errorf("minting an agent token: %w", err)
	}
	r.agent = tok.Secret
	for i := range r.templates {
		var created struct {
			Session struct{ ID string } `json:"session"`
			Run     struct{ ID string } `json:"run"`
		}
		body := fmt.Sprintf(`{"repo":"fleet/repo-%d","role":"author","issue":%d,"branch":"fix-%d","agent":{"runtime":"claude-code","instance":"host/%d"}}`, i, i+1, i, i)
		if err := r.call(r.agent, http.MethodPost, "/v1/sessions", body, &created, http.StatusCreated); err != nil {
			return fmt.Errorf("creating a session: %w", err)
		}
		for seq := 1; seq <= r.checkpoints; seq++ {
			if err := r.postAs(r.agent, "/v1/sessions/"+created.Session.ID+"/checkpoints", document(created.Run.ID, i, seq), http.StatusCreated); err != nil {
				return fmt.Errorf("writing a checkpoint: %w", err)
			}
		}
		if i == 0 {
			r.sample.id, r.sample.run = created.Session.ID, created.Run.ID
		}
	}
	return nil
}

var stages = []string{"implementing", "testing", "review_requested", "blocked"}

// document is a checkpoint of template session i, about 1.5 KB.
func document(run string, i, seq int) string {
	d := map[string]any{
		"schema_version": 1, "run_id": run, "fencing_token": 1, "role": "author",
		"stage":       stages[seq%len(stages)],
		"identity":    map[string]any{"runtime": "claude-code"},
		"target":      map[string]any{"repo": fmt.Sprintf("fleet/repo-%d", i), "issue": i + 1},
		"workspace":   map[string]any{"branch": fmt.Sprintf("fix-%d", i), "head": fmt.Sprintf("%040x", seq), "base": "main"},
		"next_action": map[string]any{"actor": "author", "action": "run the tests", "prompt": strings.Repeat("continue the work on the issue; ", 20)},
		"recovery":    map[string]any{"instructions": "git fetch && git checkout fix", "commands": []string{"git fetch", "make test"}},
		"evidence":    []map[string]any{{"kind": "test_run", "summary": strings.Repeat("ok ", 100)}},
	}
	b, _ := json.Marshal(d)
	return string(b)
}

func (r *run) signIn() error {
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest(http.MethodPost, r.base+"/ui/login", strings.NewReader(url.Values{"token": {r.operator}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", r.base)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	for _, c := range resp.Cookies() {
		r.cookie = c
	}
	if r.cookie == nil {
		return fmt.Errorf("console sign-in: %s and no cookie", resp.Status)
	}
	return nil
}

func (r *run) get(path string) error {
	req, _ := http.NewRequest(http.MethodGet, r.base+path, nil)
	if strings.HasPrefix(path, "/ui/") {
		req.AddCookie(r.cookie)
	} else {
		req.Header.Set("Authorization", "Bearer "+r.operator)
	}
	return do(req, nil, http.StatusOK)
}

func (r *run) post(path, body string, want ...int) error {
	return r.postAs(r.operator, path, body, want...)
}

func (r *run) postAs(token, path, body string, want ...int) error {
	return r.call(token, http.MethodPost, path, body, nil, want...)
}

func (r *run) call(token, method, path, body string, out any, want ...int) error {
	req, _ := http.NewRequest(method, r.base+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	return do(req, out, want...)
}

func do(req *http.Request, out any, want ...int) error {
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if !slices.Contains(want, resp.StatusCode) {
		return fmt.Errorf("%s %s: %s: %s", req.Method, req.URL.Path, resp.Status, bytes.TrimSpace(b))
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func median(xs []float64) float64 {
	slices.Sort(xs)
	return xs[len(xs)/2]
}

func printTable(w io.Writer, backend string, ns []int, results map[int]map[string]float64) {
	fmt.Fprintf(w, "| %s, median ms |", backend)
	for _, n := range ns {
		fmt.Fprintf(w, " %d |", n)
	}
	fmt.Fprint(w, "\n|---|")
	for range ns {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w)
	for _, name := range measured {
		fmt.Fprintf(w, "| %s |", name)
		for _, n := range ns {
			v, ok := results[n][name]
			switch {
			case !ok:
				fmt.Fprint(w, " — |")
			case strings.HasSuffix(name, "(s)"):
				fmt.Fprintf(w, " %.1f |", v/1000)
			case strings.HasSuffix(name, "(count)"):
				fmt.Fprintf(w, " %.0f |", v)
			default:
				fmt.Fprintf(w, " %.1f |", v)
			}
		}
		fmt.Fprintln(w)
	}
}

// scratchDatabase creates checkpointd_scale on pg's server, afresh, and
// returns its URL.
func scratchDatabase(pg string) (string, error) {
	db, err := sql.Open("postgres", pg)
	if err != nil {
		return "", err
	}
	defer db.Close()
	if _, err := db.Exec(`DROP DATABASE IF EXISTS checkpointd_scale WITH (FORCE)`); err != nil {
		return "", err
	}
	if _, err := db.Exec(`CREATE DATABASE checkpointd_scale`); err != nil {
		return "", err
	}
	u, err := url.Parse(pg)
	if err != nil {
		return "", err
	}
	u.Path = "/checkpointd_scale"
	return u.String(), nil
}

func dropScratch(pg string) {
	if db, err := sql.Open("postgres", pg); err == nil {
		db.Exec(`DROP DATABASE IF EXISTS checkpointd_scale WITH (FORCE)`)
		db.Close()
	}
}

var errNoTemplates = errors.New("no template sessions to clone")
