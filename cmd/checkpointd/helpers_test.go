package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd/store/storetest"
)

// syncBuffer collects output written by the daemon's goroutines (or a child
// process) while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// environ is the environment injected into run: the test process's own
// CHECKPOINTD_* variables never leak into the command under test.
type environ map[string]string

func (e environ) get(name string) string { return e[name] }

// servingRE finds the address serve logged once it listens; serving on
// 127.0.0.1:0 lets the kernel pick a free loopback port with no race.
var servingRE = regexp.MustCompile(`msg=serving addr=(\S+)`)

const (
	startTimeout = 20 * time.Second
	stopTimeout  = 10 * time.Second
)

// storeArgs are the flags that put a command on a data directory and, for
// PostgreSQL, on a database URL.
func storeArgs(dir, dbURL string) []string {
	args := []string{"--data-dir", dir}
	if dbURL != "" {
		args = append(args, "--database-url", dbURL)
	}
	return args
}

// backendURL is a fresh database for b: empty for SQLite (the data
// directory's own file), a fresh schema for PostgreSQL.
func backendURL(t *testing.T, b storetest.Backend) string {
	t.Helper()
	if b == storetest.SQLite {
		return ""
	}
	return storetest.URL(t, b)
}

// daemon is one `checkpointd serve` running in process.
type daemon struct {
	URL            string
	stdout, stderr *syncBuffer
	cancel         context.CancelFunc
	done           chan error

	once    sync.Once
	stopErr error
}

// startServe runs serve with args on a kernel-chosen loopback port and
// returns once it answers /healthz and /readyz; it fails t otherwise.
func startServe(t *testing.T, env environ, args ...string) *daemon {
	t.Helper()
	d, err := tryServe(t, env, args...)
	if err != nil {
		t.Fatalf("serve %v: %v", args, err)
	}
	return d
}

// tryServe is startServe returning serve's error when it exits before it
// serves.
func tryServe(t *testing.T, env environ, args ...string) (*daemon, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d := &daemon{stdout: &syncBuffer{}, stderr: &syncBuffer{}, cancel: cancel, done: make(chan error, 1)}
	argv := append([]string{"checkpointd", "serve", "--listen", "127.0.0.1:0"}, args...)
	go func() { d.done <- run(ctx, argv, env.get, d.stdout, d.stderr) }()

	deadline := time.After(startTimeout)
	for d.URL == "" {
		select {
		case err := <-d.done:
			cancel()
			if err == nil {
				err = errors.New("serve returned nil before serving")
			}
			return nil, err
		case <-deadline:
			cancel()
			t.Fatalf("serve did not log its address within %v; stderr:\n%s", startTimeout, d.stderr)
		case <-time.After(10 * time.Millisecond):
			if m := servingRE.FindStringSubmatch(d.stderr.String()); m != nil {
				d.URL = "http://" + m[1]
			}
		}
	}
	t.Cleanup(func() {
		if err := d.stop(); err != nil {
			t.Errorf("serve at %s: %v", d.URL, err)
		}
		if t.Failed() {
			t.Logf("log of serve at %s:\n%s", d.URL, d.stderr)
		}
	})
	waitReady(t, d.URL)
	return d, nil
}

// stop cancels serve's context and returns what run returned; it is
// bounded, and idempotent so tests may stop early and cleanup may repeat it.
func (d *daemon) stop() error {
	d.once.Do(func() {
		d.cancel()
		select {
		case d.stopErr = <-d.done:
		case <-time.After(stopTimeout):
			d.stopErr = fmt.Errorf("did not stop within %v after its context was cancelled", stopTimeout)
		}
	})
	return d.stopErr
}

// waitReady polls /healthz then /readyz until both answer 200.
func waitReady(t *testing.T, base string) {
	t.Helper()
	deadline := time.Now().Add(startTimeout)
	client := &http.Client{Timeout: 2 * time.Second}
	for _, path := range []string{"/healthz", "/readyz"} {
		for {
			resp, err := client.Get(base + path)
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s%s not 200 within %v (last: %v)", base, path, startTimeout, describe(resp, err))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func describe(resp *http.Response, err error) string {
	if err != nil {
		return err.Error()
	}
	return resp.Status
}

// serveRefused runs serve and returns its error; it fails t when serve
// starts instead of refusing.
func serveRefused(t *testing.T, env environ, args ...string) error {
	t.Helper()
	d, err := tryServe(t, env, args...)
	if err == nil {
		d.stop()
		t.Fatalf("serve %v started; want a refusal", args)
	}
	return err
}

// runCLI runs one non-serving command to completion.
func runCLI(t *testing.T, env environ, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	err = run(ctx, append([]string{"checkpointd"}, args...), env.get, &out, &errOut)
	return out.String(), errOut.String(), err
}

// response is a decoded API answer.
type response struct {
	status int
	header http.Header
	body   map[string]any
	raw    []byte
}

var apiClient = &http.Client{Timeout: 10 * time.Second}

// call sends one API request; a transport error fails t.
func call(t *testing.T, method, url, token string, body any) response {
	t.Helper()
	r, err := tryCall(apiClient, method, url, token, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return r
}

func tryCall(client *http.Client, method, url, token string, body any) (response, error) {
	var rd io.Reader
	if body != nil {
		j, err := json.Marshal(body)
		if err != nil {
			return response{}, err
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return response{}, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return send(client, req)
}

// send sends req and reads its whole answer, the JSON body decoded when
// it is JSON.
func send(client *http.Client, req *http.Request) (response, error) {
	resp, err := client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, err
	}
	r := response{status: resp.StatusCode, header: resp.Header, raw: raw}
	_ = json.Unmarshal(raw, &r.body)
	return r, nil
}

func (r response) expect(t *testing.T, status int) response {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.raw)
	}
	return r
}

func (r response) get(path ...string) any {
	var v any = r.body
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func (r response) str(path ...string) string { s, _ := r.get(path...).(string); return s }

func (r response) num(path ...string) int64 { f, _ := r.get(path...).(float64); return int64(f) }

var sessionBody = map[string]any{
	"repo": "acme/widgets", "role": "author", "issue": 12, "branch": "fix-12",
	"agent": map[string]any{"runtime": "claude-code", "provider": "anthropic", "model": "m", "instance": "host-7/pid-1"},
}

// session is a created session with its current run.
type session struct {
	id, runID string
	fencing   int64
}

func newSession(t *testing.T, base, token string) session {
	t.Helper()
	r := call(t, "POST", base+"/v1/sessions", token, sessionBody).expect(t, http.StatusCreated)
	s := session{id: r.str("session", "id"), runID: r.str("run", "id"), fencing: r.num("run", "fencing_token")}
	if s.id == "" || s.runID == "" || s.fencing == 0 {
		t.Fatalf("session response lacks ids: %s", r.raw)
	}
	return s
}

// checkpointDoc is a complete schema-v1 document for s; note makes
// documents (and so their digests) distinct.
func checkpointDoc(s session, note string) map[string]any {
	return map[string]any{
		"schema_version": 1, "run_id": s.runID, "fencing_token": s.fencing, "role": "author", "stage": "implementing",
		"identity":    map[string]any{"runtime": "claude-code"},
		"target":      map[string]any{"repo": "acme/widgets", "issue": 12},
		"workspace":   map[string]any{"branch": "fix-12", "head": "0123456789abcdef0123456789abcdef01234567"},
		"next_action": map[string]any{"actor": "author", "action": "run the tests"},
		"recovery":    map[string]any{"instructions": "git fetch && git checkout fix-12"},
		"note":        note,
	}
}

// readOwnerOnly reads a file that must be readable by its owner only.
func readOwnerOnly(t *testing.T, path string) []byte {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("%s has mode %v, want 0600", path, perm)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// readSecret reads a 0600 single-line secret file and returns its content.
func readSecret(t *testing.T, path string) string {
	t.Helper()
	b := readOwnerOnly(t, path)
	s := strings.TrimSuffix(string(b), "\n")
	if s == "" || strings.ContainsAny(s, "\r\n \t") {
		t.Fatalf("%s holds %q, want one non-empty line", path, b)
	}
	return s
}

func mustNotExist(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s exists (stat: %v); want it absent", path, err)
	}
}

func tokenPath(dir string) string { return filepath.Join(dir, "operator.token") }
func keyPath(dir string) string   { return filepath.Join(dir, "checkpointd.key") }
