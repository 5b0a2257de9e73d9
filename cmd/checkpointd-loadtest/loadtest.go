package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/client"
)

// Bounds of a load test: it is an operator tool run against a live daemon,
// so it must stop by itself and never grow without limit.
const (
	loadMaxClients  = 256
	loadMaxDuration = 5 * time.Minute
	// loadMaxFailStreak stops a client after this many failed writes in a
	// row: a daemon that went away or a superseded run would otherwise be
	// hammered for the rest of the duration.
	loadMaxFailStreak = 10
	// loadRequestTimeout bounds one request, so a stuck daemon cannot hold a
	// client past its duration for long.
	loadRequestTimeout = 30 * time.Second
	loadMinDocBytes    = 1 << 10
	loadMaxDocBytes    = 64 << 10
)

// loadConfig is a validated load test.
type loadConfig struct {
	URL         string
	Token       string
	Repo        string
	Clients     int
	Duration    time.Duration
	MaxRequests int64
	DocBytes    int
	// IdempotencyKeys sends a fresh Idempotency-Key with every write, as a
	// careful agent does; the daemon then also claims and records the key.
	IdempotencyKeys bool
}

// loadtestCommand measures the real HTTP write path of a running daemon for
// capacity planning; scripts/floor/ holds the raw-database floors to compare
// it with (docs/performance.md).
func loadtestCommand(from func(string) cli.ValueSourceChain, clientFlags []cli.Flag, stdout io.Writer) *cli.Command {
	flags := append([]cli.Flag{}, clientFlags...)
	flags = append(flags,
		&cli.IntFlag{Name: "clients", Value: 16, Sources: from("CHECKPOINTD_LOADTEST_CLIENTS"),
			Usage: fmt.Sprintf("concurrent writers, each on its own session (1-%d)", loadMaxClients)},
		&cli.DurationFlag{Name: "duration", Value: 10 * time.Second, Sources: from("CHECKPOINTD_LOADTEST_DURATION"),
			Usage: fmt.Sprintf("how long to write (at most %s)", loadMaxDuration)},
		&cli.Int64Flag{Name: "max-requests", Sources: from("CHECKPOINTD_LOADTEST_MAX_REQUESTS"),
			Usage: "stop after this many checkpoint writes in total (0: only the duration bounds the test)"},
		&cli.StringFlag{Name: "repo", Value: "loadtest/loadtest", Sources: from("CHECKPOINTD_LOADTEST_REPO"),
			Usage: "repo the load-test sessions are created on (owner/name; the token's scope must cover it)"},
		&cli.IntFlag{Name: "doc-bytes", Value: 3000, Sources: from("CHECKPOINTD_LOADTEST_DOC_BYTES"),
			Usage: fmt.Sprintf("approximate size of each checkpoint document (%d-%d)", loadMinDocBytes, loadMaxDocBytes)},
		&cli.BoolFlag{Name: "idempotency-keys", Sources: from("CHECKPOINTD_LOADTEST_IDEMPOTENCY_KEYS"),
			Usage: "send a unique Idempotency-Key with every write (the daemon then claims and records each key)"},
	)
	return &cli.Command{
		Name:  "loadtest",
		Usage: "measure checkpoint writes/s and latency through the HTTP API of a running daemon",
		Description: "Creates one session per client on --repo, writes complete ~3 KB checkpoints back to back\n" +
			"over keep-alive connections until --duration or --max-requests, then ends the sessions.\n" +
			"It writes REAL sessions, checkpoints and events into the daemon's database: point it at a\n" +
			"test daemon, or at a repo name nobody uses. Exits non-zero if any write failed.",
		Flags: flags,
		Action: func(ctx context.Context, c *cli.Command) error {
			cfg := loadConfig{
				URL: strings.TrimRight(c.String("url"), "/"), Token: strings.TrimSpace(c.String("token")),
				Repo: c.String("repo"), Clients: c.Int("clients"), Duration: c.Duration("duration"),
				MaxRequests: c.Int64("max-requests"), DocBytes: c.Int("doc-bytes"),
				IdempotencyKeys: c.Bool("idempotency-keys"),
			}
			if err := cfg.validate(); err != nil {
				return err
			}
			res, err := runLoad(ctx, cfg)
			if res != nil {
				res.print(stdout, cfg)
			}
			if err != nil {
				return err
			}
			if failed := res.Requests - res.OK; failed > 0 {
				return fmt.Errorf("loadtest: %d of %d writes failed", failed, res.Requests)
			}
			return nil
		},
	}
}

func (c loadConfig) validate() error {
	if c.Token == "" {
		return errors.New("loadtest: an agent or operator token is required: --token or CHECKPOINTD_TOKEN")
	}
	if !strings.HasPrefix(c.URL, "http://") && !strings.HasPrefix(c.URL, "https://") {
		return fmt.Errorf("loadtest: --url must be http:// or https://, not %q", c.URL)
	}
	if c.Clients < 1 || c.Clients > loadMaxClients {
		return fmt.Errorf("loadtest: --clients must be 1-%d, not %d", loadMaxClients, c.Clients)
	}
	if c.Duration <= 0 || c.Duration > loadMaxDuration {
		return fmt.Errorf("loadtest: --duration must be more than 0 and at most %s, not %s", loadMaxDuration, c.Duration)
	}
	if c.MaxRequests < 0 {
		return fmt.Errorf("loadtest: --max-requests must not be negative")
	}
	if !checkpointd.ValidRepo(c.Repo) {
		return fmt.Errorf("loadtest: --repo must be owner/name, not %q", c.Repo)
	}
	if c.DocBytes < loadMinDocBytes || c.DocBytes > loadMaxDocBytes {
		return fmt.Errorf("loadtest: --doc-bytes must be %d-%d, not %d", loadMinDocBytes, loadMaxDocBytes, c.DocBytes)
	}
	return nil
}

// loadResult is what a load test measured.
type loadResult struct {
	Requests int64 // writes attempted
	OK       int64 // writes answered 201
	// Errors counts failed writes by "status code" ("transport" when no
	// response came back).
	Errors  map[string]int64
	Elapsed time.Duration
	// Latencies of the successful writes, sorted. At most MaxRequests or
	// duration × rate entries: a 5-minute test at 10k writes/s is 24 MB.
	Latencies []time.Duration
	Sessions  int
	// Stopped explains clients that gave up early.
	Stopped []string
	// UserCPU and SystemCPU are what this process spent while writing:
	// the load generator's share of the machine it measures on.
	UserCPU, SystemCPU time.Duration
}

// cpuTimes is the user and system CPU this process used so far.
type cpuTimes struct{ user, system time.Duration }

func processCPU() cpuTimes {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return cpuTimes{}
	}
	return cpuTimes{time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())}
}

func (c cpuTimes) sub(from cpuTimes) (user, system time.Duration) {
	return c.user - from.user, c.system - from.system
}

// loadSession is one client's session and the run it writes as.
type loadSession struct {
	ID    string
	RunID string
	Token int64
}

// runLoad creates the sessions, drives the writers and ends the sessions.
// The result is returned even with an error when writes happened, so the
// operator still sees what was measured.
func runLoad(ctx context.Context, cfg loadConfig) (*loadResult, error) {
	// The sessions are created and ended through the Go client; the writes
	// go on connections of their own (loadConn), and neither uses a proxy.
	httpClient := &http.Client{Timeout: loadRequestTimeout, Transport: &http.Transport{}}
	defer httpClient.CloseIdleConnections()
	// Every request is tried once: a load test counts a failed write, it
	// does not hide it behind a retry.
	cl, err := client.New(client.Config{Address: cfg.URL, Token: cfg.Token, HTTPClient: httpClient, MaxAttempts: 1,
		UserAgent: loadUserAgent()})
	if err != nil {
		return nil, fmt.Errorf("loadtest: %w", err)
	}
	lc := &loadClient{c: cl, cfg: cfg}

	sessions := make([]loadSession, 0, cfg.Clients)
	var setupErr error
	for i := range cfg.Clients {
		s, err := lc.createSession(ctx, i)
		if err != nil {
			setupErr = apiError(fmt.Sprintf("loadtest: create session %d of %d", i+1, cfg.Clients), err)
			break
		}
		sessions = append(sessions, s)
	}
	var res *loadResult
	if setupErr == nil {
		cpu0 := processCPU()
		res = lc.drive(ctx, sessions)
		res.UserCPU, res.SystemCPU = processCPU().sub(cpu0)
		res.Sessions = len(sessions)
	}
	// Sessions are ended even when the test is interrupted, with their own
	// deadline, so a Ctrl-C does not leave active sessions behind.
	endCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), loadRequestTimeout)
	defer cancel()
	var endErrs []error
	for _, s := range sessions {
		if err := lc.endSession(endCtx, s); err != nil {
			endErrs = append(endErrs, apiError("end session "+s.ID, err))
		}
	}
	if setupErr != nil {
		return nil, errors.Join(append([]error{setupErr}, endErrs...)...)
	}
	if len(endErrs) > 0 {
		return res, fmt.Errorf("loadtest: %w", errors.Join(endErrs...))
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("loadtest interrupted: %w", err)
	}
	return res, nil
}

type loadClient struct {
	c   *client.Client
	cfg loadConfig
}

func (lc *loadClient) createSession(ctx context.Context, i int) (loadSession, error) {
	out, err := lc.c.Sessions().Create(ctx, &client.CreateSessionRequest{
		Repo: lc.cfg.Repo, Role: "author", Issue: 1, Branch: fmt.Sprintf("loadtest-%d", i),
		Agent: checkpointd.Agent{Runtime: "checkpointd-loadtest", Instance: fmt.Sprintf("loadtest/client-%d", i)},
	}, nil)
	if err != nil {
		return loadSession{}, err
	}
	if out.Session == nil || out.Run == nil || out.Session.ID == "" || out.Run.ID == "" {
		return loadSession{}, errors.New("the daemon answered without a session or run id")
	}
	return loadSession{ID: out.Session.ID, RunID: out.Run.ID, Token: out.Run.FencingToken}, nil
}

func (lc *loadClient) endSession(ctx context.Context, s loadSession) error {
	_, err := lc.c.Sessions().End(ctx, s.ID, &client.EndRequest{RunID: s.RunID, Outcome: checkpointd.OutcomeCompleted})
	return err
}

// clientStats is one writer's share of the result, merged at the end so the
// hot loop takes no lock.
type clientStats struct {
	requests, ok int64
	errors       map[string]int64
	latencies    []time.Duration
	stopped      string
}

// drive runs one writer per session until the duration is over, the
// request budget is spent or ctx is cancelled.
func (lc *loadClient) drive(ctx context.Context, sessions []loadSession) *loadResult {
	var budget atomic.Int64 // writes claimed so far, against MaxRequests
	stats := make([]clientStats, len(sessions))
	start := time.Now()
	deadline := start.Add(lc.cfg.Duration)
	var wg sync.WaitGroup
	for i, s := range sessions {
		wg.Go(func() { stats[i] = lc.write(ctx, s, deadline, &budget) })
	}
	wg.Wait()
	res := &loadResult{Elapsed: time.Since(start), Errors: map[string]int64{}}
	for _, st := range stats {
		res.Requests += st.requests
		res.OK += st.ok
		for k, n := range st.errors {
			res.Errors[k] += n
		}
		res.Latencies = append(res.Latencies, st.latencies...)
		if st.stopped != "" {
			res.Stopped = append(res.Stopped, st.stopped)
		}
	}
	slices.Sort(res.Latencies)
	return res
}

// write is one client's loop: back-to-back checkpoint writes on its own
// session over its own keep-alive connection. A request in flight when the
// duration ends is allowed to finish (bounded by loadRequestTimeout): cutting
// it would count a write that may well have committed as an error.
func (lc *loadClient) write(ctx context.Context, s loadSession, deadline time.Time, budget *atomic.Int64) clientStats {
	st := clientStats{errors: map[string]int64{}}
	doc := newLoadDocument(lc.cfg.Repo, s, lc.cfg.DocBytes)
	conn, err := newLoadConn(lc.cfg.URL, lc.cfg.Token, s.ID)
	if err != nil {
		st.stopped = fmt.Sprintf("session %s: %v", s.ID, err)
		return st
	}
	defer conn.close()
	streak := 0
	for n := int64(1); ctx.Err() == nil && time.Now().Before(deadline); n++ {
		if lc.cfg.MaxRequests > 0 && budget.Add(1) > lc.cfg.MaxRequests {
			break
		}
		key := ""
		if lc.cfg.IdempotencyKeys {
			key = s.ID + "-" + strconv.FormatInt(n, 10)
		}
		t0 := time.Now()
		failure, err := conn.post(ctx, doc.stamp(n), key)
		took := time.Since(t0)
		if ctx.Err() != nil && err != nil {
			break // interrupted by the operator: not a failed write
		}
		st.requests++
		switch {
		case err != nil:
			st.errors["transport"]++
		case failure != "":
			st.errors[failure]++
		default:
			st.ok++
			st.latencies = append(st.latencies, took)
			streak = 0
			continue
		}
		if streak++; streak >= loadMaxFailStreak {
			st.stopped = fmt.Sprintf("session %s: stopped after %d failed writes in a row", s.ID, streak)
			break
		}
	}
	return st
}

// percentile is the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p/100*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// print writes the result as "key: value" lines, easy to paste into an issue
// and to parse from a script (scripts/floor/compare.sh does).
func (r *loadResult) print(w io.Writer, cfg loadConfig) {
	ms := func(d time.Duration) string {
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 2, 64) + "ms"
	}
	rate := 0.0
	if r.Elapsed > 0 {
		rate = float64(r.OK) / r.Elapsed.Seconds()
	}
	idem := ""
	if cfg.IdempotencyKeys {
		idem = ", with Idempotency-Keys"
	}
	fmt.Fprintf(w, "target:      %s repo %s, %d clients, %s, %d-byte documents%s\n", cfg.URL, cfg.Repo, cfg.Clients, cfg.Duration, cfg.DocBytes, idem)
	fmt.Fprintf(w, "sessions:    %d (ended)\n", r.Sessions)
	fmt.Fprintf(w, "requests:    %d\n", r.Requests)
	fmt.Fprintf(w, "succeeded:   %d\n", r.OK)
	fmt.Fprintf(w, "errors:      %d%s\n", r.Requests-r.OK, formatErrors(r.Errors))
	fmt.Fprintf(w, "elapsed:     %s\n", r.Elapsed.Round(time.Millisecond))
	fmt.Fprintf(w, "writes/s:    %.1f\n", rate)
	fmt.Fprintf(w, "latency p50: %s\n", ms(percentile(r.Latencies, 50)))
	fmt.Fprintf(w, "latency p90: %s\n", ms(percentile(r.Latencies, 90)))
	fmt.Fprintf(w, "latency p99: %s\n", ms(percentile(r.Latencies, 99)))
	fmt.Fprintf(w, "latency max: %s\n", ms(percentile(r.Latencies, 100)))
	if r.OK > 0 {
		fmt.Fprintf(w, "client cpu:  %.2fs user, %.2fs sys, %.0f µs/write\n", r.UserCPU.Seconds(), r.SystemCPU.Seconds(),
			float64((r.UserCPU+r.SystemCPU).Microseconds())/float64(r.OK))
	}
	for _, s := range r.Stopped {
		fmt.Fprintf(w, "stopped:     %s\n", s)
	}
}

func formatErrors(m map[string]int64) string {
	if len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s: %d", k, m[k])
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// loadDocument is a client's checkpoint document, marshalled once: each write
// only stamps its number into it, so the client spends its CPU on
// sending, not on JSON, and leaves the cores to the daemon it measures.
type loadDocument struct {
	raw []byte
	at  int // offset of the write-number placeholder in raw
}

// loadCounter is the placeholder stamped with each write's number. It makes
// every document differ, as real successive checkpoints do, so no dedup or
// idempotency shortcut can answer for the daemon.
const loadCounter = "000000000000"

// newLoadDocument builds a complete schema-v1 checkpoint shaped like
// testdata/checkpoint-full.json (identity, target, workspace, pending work,
// evidence, next action, recovery) padded with a note to about size bytes. It
// names no leases: the session holds none, and a lease it does not hold
// would make every checkpoint incomplete.
func newLoadDocument(repo string, s loadSession, size int) loadDocument {
	branch := "loadtest-" + s.ID
	head := "9fceb02d0ae598e95dc970b74767f19372d61af8"
	d := map[string]any{
		"schema_version": checkpointd.SchemaVersion, "run_id": s.RunID, "fencing_token": s.Token,
		"identity": map[string]any{"runtime": "checkpointd-loadtest", "runtime_version": "1.0.0",
			"provider": "anthropic", "model": "claude-sonnet-4-5", "instance": "loadtest/" + s.ID},
		"role":         "author",
		"target":       map[string]any{"repo": repo, "issue": 1, "pr": 2},
		"workspace":    map[string]any{"worktree": "/srv/agents/loadtest/" + s.ID, "branch": branch, "head": head, "base": "main"},
		"capabilities": []string{"git.push", "pr.create", "pr.comment", "tests.run"},
		"stage":        "implementing",
		"last_completed_action": map[string]any{"kind": "git.commit", "at": "2026-03-01T12:04:05Z",
			"summary": "Load-test write " + loadCounter + ": guard Widget.Render against a nil theme and add a regression test."},
		"pending_operation": map[string]any{"kind": "tests.run", "started_at": "2026-03-01T12:05:00Z",
			"summary": "go test ./... -race on the branch head before replying to the review"},
		"pending_mutation": map[string]any{"kind": "gitea.pr.comment", "target": repo + "!2",
			"idempotency_key": "loadtest-" + s.ID + "-reply",
			"summary":         "Reply to review #2: nil theme now handled, test added, asked to re-review."},
		"evidence": []map[string]any{
			{"kind": "test_run", "ref": "https://ci.example.invalid/builds/881", "summary": "go test ./... passed: 412 tests, 0 failures"},
			{"kind": "git.commit", "ref": head, "summary": "fix: guard Render against nil theme"},
			{"kind": "review", "ref": "https://git.example.invalid/pulls/2#issuecomment-2207",
				"summary": "Reviewer asked for a regression test and a changelog entry."},
		},
		"blocker": map[string]any{"kind": "waiting_review", "waiting_on": "reviewer",
			"summary": "Changes requested; the fix is pushed, waiting for the reviewer to look again."},
		"next_action": map[string]any{"actor": "author",
			"action": "Post the reply to review #2 unless a comment with the idempotency key already exists, then request a re-review.",
			"prompt": "You are resuming work on the load-test session. Check whether your reply to review #2 was posted; if not, post it. Then request a re-review and wait."},
		"recovery": map[string]any{
			"instructions": "Fetch the branch and make sure the worktree is at the recorded head before doing anything. If the head moved, re-read the PR before continuing.",
			"commands":     []string{"git fetch origin", "git checkout " + branch, "git reset --hard " + head, "go test ./..."},
		},
	}
	raw, _ := json.Marshal(d)
	// Pad with a note of ordinary prose (nothing the redactor would rewrite)
	// up to the requested size.
	const prose = "The flaky TestWatchReload failed once on CI and passed on retry; unrelated to this change. "
	note := make([]byte, 0, max(size-len(raw)-len(`,"note":""`), 0))
	for len(note) < cap(note) {
		note = append(note, prose[:min(len(prose), cap(note)-len(note))]...)
	}
	if len(note) > 0 {
		d["note"] = strings.TrimSpace(string(note)) + "."
		raw, _ = json.Marshal(d)
	}
	return loadDocument{raw: raw, at: bytes.Index(raw, []byte(loadCounter))}
}

// stamp writes n into the document's placeholder and returns it. Each
// client has a document of its own, and loadConn.post copies it out before
// the next stamp.
func (d loadDocument) stamp(n int64) []byte {
	digits := strconv.FormatInt(n, 10)
	if len(digits) <= len(loadCounter) {
		copy(d.raw[d.at:d.at+len(loadCounter)], loadCounter)
		copy(d.raw[d.at+len(loadCounter)-len(digits):], digits)
	}
	return d.raw
}

// apiError says why a call of the Go client failed: the status, problem
// code and detail the daemon answered, or that it could not be reached.
func apiError(what string, err error) error {
	var pe *client.Error
	var te *client.TransportError
	switch {
	case errors.As(err, &pe):
		msg := fmt.Sprintf("%s: %d %s", what, pe.Status, pe.Code)
		if pe.Detail != "" {
			msg += ": " + pe.Detail
		}
		return errors.New(msg)
	case errors.As(err, &te):
		return fmt.Errorf("%s: cannot reach the daemon (%s %s): %v; is it running, and is --url (CHECKPOINTD_URL) its address?",
			what, te.Method, te.Path, te.Err)
	}
	return fmt.Errorf("%s: %w", what, err)
}
