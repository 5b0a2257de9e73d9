package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd/store/storetest"
)

// watchers reads the daemon's checkpointd_watchers gauge.
func watchers(t *testing.T, base string) string {
	t.Helper()
	resp, err := apiClient.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "checkpointd_watchers ") {
			return strings.TrimPrefix(line, "checkpointd_watchers ")
		}
	}
	return ""
}

// TestWatchCommand runs `checkpointd watch` against a running daemon: one
// line per change, or one JSON object per line with --json; a bad filter
// is the daemon's 422, not a retry loop.
func TestWatchCommand(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		dir := t.TempDir()
		d := startServe(t, environ{}, storeArgs(dir, backendURL(t, b))...)
		op := readSecret(t, tokenPath(dir))
		type result struct {
			out string
			err error
		}
		watch := func(args ...string) chan result {
			done := make(chan result, 1)
			go func() {
				out, _, err := runCLI(t, environ{}, append([]string{"watch", "--url", d.URL, "--data-dir", dir, "--count", "3"}, args...)...)
				done <- result{out, err}
			}()
			return done
		}
		human, js := watch(), watch("--json", "--repo", "acme/*")
		for deadline := time.Now().Add(10 * time.Second); watchers(t, d.URL) != "2"; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("watchers %q, want 2", watchers(t, d.URL))
			}
		}
		s := newSession(t, d.URL, op)
		call(t, "POST", d.URL+"/v1/sessions/"+s.id+"/checkpoints", op, checkpointDoc(s, "one")).expect(t, http.StatusCreated)

		r := <-human
		lines := strings.Split(strings.TrimSpace(r.out), "\n")
		if r.err != nil || len(lines) != 3 || !strings.Contains(lines[0], "session") || !strings.Contains(lines[0], "created") ||
			!strings.Contains(lines[1], "run") || !strings.Contains(lines[1], "started "+s.runID) ||
			!strings.Contains(lines[2], "checkpoint") || !strings.Contains(lines[2], "acme/widgets "+s.id+" seq 1 complete (implementing)") {
			t.Errorf("watch: %v\n%s", r.err, r.out)
		}
		r = <-js
		var types []string
		for _, line := range strings.Split(strings.TrimSpace(r.out), "\n") {
			var e struct {
				ID   string         `json:"id"`
				Type string         `json:"type"`
				Data map[string]any `json:"data"`
			}
			if err := json.Unmarshal([]byte(line), &e); err != nil || e.ID == "" || e.Data["session_id"] != s.id {
				t.Errorf("watch --json line %q: %v", line, err)
			}
			types = append(types, e.Type)
		}
		if r.err != nil || strings.Join(types, " ") != "session run checkpoint" {
			t.Errorf("watch --json: %v %v\n%s", r.err, types, r.out)
		}
		if _, _, err := runCLI(t, environ{}, "watch", "--url", d.URL, "--data-dir", dir, "--repo", "nope"); err == nil ||
			!strings.Contains(err.Error(), "422") {
			t.Errorf("watch --repo nope: %v, want the 422", err)
		}
	})
}

// TestServeShutdownEndsStreams: a daemon with open watch streams stops at
// once, not after --shutdown-timeout: the streams end when it shuts down.
func TestServeShutdownEndsStreams(t *testing.T) {
	dir := t.TempDir()
	d := startServe(t, environ{}, append(storeArgs(dir, backendURL(t, storetest.SQLite)), "--shutdown-timeout", "20s")...)
	op := readSecret(t, tokenPath(dir))
	req, _ := http.NewRequest("GET", d.URL+"/v1/watch", nil)
	req.Header.Set("Authorization", "Bearer "+op)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("watch: %v %v", resp, err)
	}
	defer resp.Body.Close()
	ended := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, resp.Body)
		close(ended)
	}()
	start := time.Now()
	if err := d.stop(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("serve took %s to stop with a watch stream open", took)
	}
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Error("the stream did not end with the daemon")
	}
}
