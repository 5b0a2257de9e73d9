package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/api"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// loadtestServer serves the real API over a real SQLite store on loopback
// and returns its URL, the store and an agent token.
func loadtestServer(t *testing.T, maxDocBytes int64) (string, *store.Store, string) {
	t.Helper()
	s := storetest.Open(t, storetest.SQLite, checkpointd.SystemClock{})
	srv := httptest.NewServer(api.New(api.Deps{Store: api.StoresOf(s), Workflow: checkpointd.DefaultWorkflow(),
		DigestKey: []byte("loadtest-digest-key"), MaxDocumentBytes: maxDocBytes}))
	t.Cleanup(srv.Close)
	secret := checkpointd.NewTokenSecret()
	if _, err := s.CreateToken(t.Context(), checkpointd.TokenSpec{Name: "loadtest", Role: checkpointd.RoleAgent, Scope: []string{"loadtest/*"}}, checkpointd.HashToken(secret)); err != nil {
		t.Fatal(err)
	}
	return srv.URL, s, secret
}

// runLoadtest runs the CLI as an operator would and returns its output as
// "key: value" pairs.
func runLoadtest(t *testing.T, env map[string]string, args ...string) (map[string]string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), append([]string{"checkpointd-loadtest"}, args...),
		func(k string) string { return env[k] }, &stdout, &stderr)
	out := map[string]string{}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out, stdout.String(), err
}

func loadtestNumber(t *testing.T, out map[string]string, key string) float64 {
	t.Helper()
	v, _, _ := strings.Cut(out[key], " ")
	f, err := strconv.ParseFloat(strings.TrimSuffix(v, "ms"), 64)
	if err != nil {
		t.Fatalf("%s: %q is not a number: %v", key, out[key], err)
	}
	return f
}

func TestLoadtestWritesCheckpoints(t *testing.T) {
	url, s, token := loadtestServer(t, 0)
	start := time.Now()
	// The token comes from the environment, as an operator's usually does.
	out, raw, err := runLoadtest(t, map[string]string{"CHECKPOINTD_TOKEN": token},
		"--url", url, "--clients", "2", "--duration", "1s")
	if err != nil {
		t.Fatalf("loadtest: %v\n%s", err, raw)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("a 1s load test took %s", took)
	}
	requests, ok := loadtestNumber(t, out, "requests"), loadtestNumber(t, out, "succeeded")
	if requests < 2 || ok != requests || loadtestNumber(t, out, "errors") != 0 {
		t.Fatalf("requests %v, succeeded %v, errors %v; want every write to succeed\n%s", requests, ok, out["errors"], raw)
	}
	rate := loadtestNumber(t, out, "writes/s")
	if elapsed, err := time.ParseDuration(out["elapsed"]); err != nil || elapsed < time.Second {
		t.Errorf("elapsed %q, want at least the 1s duration", out["elapsed"])
	} else if want := ok / elapsed.Seconds(); rate < want*0.99 || rate > want*1.01 {
		t.Errorf("writes/s %v, want succeeded/elapsed = %.1f", rate, want)
	}
	p50, p90, p99, pmax := loadtestNumber(t, out, "latency p50"), loadtestNumber(t, out, "latency p90"), loadtestNumber(t, out, "latency p99"), loadtestNumber(t, out, "latency max")
	if p50 <= 0 || p50 > p90 || p90 > p99 || p99 > pmax {
		t.Errorf("latencies not ordered: p50 %v p90 %v p99 %v max %v", p50, p90, p99, pmax)
	}
	// The load generator's own CPU, its share of the machine it measures.
	if m := regexp.MustCompile(`^[0-9.]+s user, [0-9.]+s sys, ([0-9]+) µs/write$`).FindStringSubmatch(out["client cpu"]); m == nil || m[1] == "0" {
		t.Errorf("client cpu %q, want user, sys and a non-zero µs/write", out["client cpu"])
	}

	// Every acknowledged write is in the store, on sessions that were ended.
	sessions, err := s.ListSessions(t.Context(), store.SessionFilter{Repo: "loadtest/loadtest", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(sessions) != 2 {
		t.Fatalf("%d sessions on loadtest/loadtest, want one per client (2)", len(sessions))
	}
	var stored int64
	for _, sess := range sessions {
		if sess.State != checkpointd.SessionEnded || sess.Outcome != checkpointd.OutcomeCompleted {
			t.Errorf("session %s is %s/%s, want ended/completed", sess.ID, sess.State, sess.Outcome)
		}
		if sess.Latest == nil {
			t.Fatalf("session %s has no checkpoint", sess.ID)
		}
		stored += sess.Latest.Seq
		if !sess.Latest.Complete {
			t.Errorf("session %s: the load document is incomplete: missing %v", sess.ID, sess.Latest.Missing)
		}
		cp, err := s.GetCheckpoint(t.Context(), sess.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := json.Marshal(cp.Document)
		if len(body) < 2500 || len(body) > 3500 {
			t.Errorf("stored document is %d bytes, want about 3000", len(body))
		}
	}
	if stored != int64(ok) {
		t.Errorf("%d checkpoints stored, %v acknowledged", stored, ok)
	}
}

func TestLoadtestMaxRequests(t *testing.T) {
	url, s, token := loadtestServer(t, 0)
	out, raw, err := runLoadtest(t, nil, "--url", url, "--token", token, "--clients", "3",
		"--duration", "1m", "--max-requests", "25", "--repo", "loadtest/max")
	if err != nil {
		t.Fatalf("loadtest: %v\n%s", err, raw)
	}
	if got := loadtestNumber(t, out, "succeeded"); got != 25 {
		t.Errorf("succeeded %v, want exactly --max-requests 25\n%s", got, raw)
	}
	sessions, err := s.ListSessions(t.Context(), store.SessionFilter{Repo: "loadtest/max", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var stored int64
	for _, sess := range sessions {
		if sess.Latest != nil {
			stored += sess.Latest.Seq
		}
	}
	if stored != 25 {
		t.Errorf("%d checkpoints stored, want 25", stored)
	}
}

// With --idempotency-keys every write carries its own key, so none is
// answered as a replay of another.
func TestLoadtestIdempotencyKeys(t *testing.T) {
	url, s, token := loadtestServer(t, 0)
	out, raw, err := runLoadtest(t, nil, "--url", url, "--token", token, "--clients", "2",
		"--duration", "1m", "--max-requests", "6", "--idempotency-keys", "--repo", "loadtest/idem")
	if err != nil {
		t.Fatalf("loadtest: %v\n%s", err, raw)
	}
	if got := loadtestNumber(t, out, "succeeded"); got != 6 {
		t.Errorf("succeeded %v, want 6 (201s; a replay would answer 200)\n%s", got, raw)
	}
	if !strings.Contains(out["target"], "Idempotency-Keys") {
		t.Errorf("target line %q does not say keys were sent", out["target"])
	}
	sessions, err := s.ListSessions(t.Context(), store.SessionFilter{Repo: "loadtest/idem", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var stored int64
	for _, sess := range sessions {
		if sess.Latest != nil {
			stored += sess.Latest.Seq
		}
	}
	if stored != 6 {
		t.Errorf("%d checkpoints stored, want 6", stored)
	}
}

// A write the daemon rejects makes the command fail and is reported by status
// and problem code; the client gives up instead of spinning for the duration.
func TestLoadtestReportsFailedWrites(t *testing.T) {
	url, _, token := loadtestServer(t, 1024) // smaller than the documents
	out, raw, err := runLoadtest(t, nil, "--url", url, "--token", token, "--clients", "1", "--duration", "30s")
	if err == nil || !strings.Contains(err.Error(), "writes failed") {
		t.Fatalf("err %v, want writes failed\n%s", err, raw)
	}
	if !strings.Contains(out["errors"], "413 payload_too_large") {
		t.Errorf("errors %q, want them counted as 413 payload_too_large", out["errors"])
	}
	if loadtestNumber(t, out, "requests") != loadMaxFailStreak || out["stopped"] == "" {
		t.Errorf("want the client to stop after %d failures in a row\n%s", loadMaxFailStreak, raw)
	}
}

func TestLoadtestFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no token", []string{"--url", "http://127.0.0.1:1"}, "token is required"},
		{"no clients", []string{"--token", "x", "--clients", "0"}, "--clients"},
		{"too many clients", []string{"--token", "x", "--clients", "257"}, "--clients"},
		{"too long", []string{"--token", "x", "--duration", "6m"}, "--duration"},
		{"bad repo", []string{"--token", "x", "--repo", "nope"}, "--repo"},
		{"tiny doc", []string{"--token", "x", "--doc-bytes", "10"}, "--doc-bytes"},
		{"bad url", []string{"--token", "x", "--url", "127.0.0.1:8080"}, "--url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := runLoadtest(t, nil, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestLoadDocumentSize(t *testing.T) {
	s := loadSession{ID: "ses_01JQ8ZK4T6W2B9N3C5D7F1G0HX", RunID: "run_01JQ8ZK4T6W2B9N3C5D7F1G0HX", Token: 1}
	for _, size := range []int{loadMinDocBytes, 3000, loadMaxDocBytes} {
		d := newLoadDocument("loadtest/loadtest", s, size)
		b := d.stamp(1234)
		if len(b) < size-10 || len(b) > max(size, 2600)+10 {
			t.Errorf("size %d: document is %d bytes", size, len(b))
		}
		if !bytes.Contains(b, []byte("write 000000001234:")) {
			t.Errorf("size %d: write number not stamped", size)
		}
		if _, err := checkpointd.PrepareCheckpoint(b, checkpointd.DefaultWorkflow(), []byte("k")); err != nil {
			t.Errorf("size %d: the load document is not a valid checkpoint: %v", size, err)
		}
	}
}

// TestLoadtestTokenHelp proves the --token help names only what the load
// test has: it reads no operator.token from a --data-dir.
func TestLoadtestTokenHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"checkpointd-loadtest", "--help"}, func(string) string { return "" }, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	out := stdout.String()
	if !strings.Contains(out, "--token") || !strings.Contains(out, "--clients") {
		t.Fatalf("--help names no --token or --clients:\n%s", out)
	}
	if strings.Contains(out, "data-dir") {
		t.Errorf("--help mentions a --data-dir the load test has not:\n%s", out)
	}
}
