package main

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/internal/present"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestDrainCommand drives `checkpointd drain` against a running daemon,
// with the operator token read from the data directory: start (twice: the
// second is refused), status, complete refused with the blocking list,
// status --wait timing out then returning once the session is ready,
// complete, and cancel lifting the completed drain. A restart keeps a
// running drain and lifts a completed one.
func TestDrainCommand(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		dir := t.TempDir()
		dbURL := backendURL(t, b)
		d := startServe(t, environ{}, storeArgs(dir, dbURL)...)
		op := readSecret(t, tokenPath(dir))
		sess := newSession(t, d.URL, op)
		cli := func(args ...string) (string, error) {
			t.Helper()
			out, _, err := runCLI(t, environ{}, append(append([]string{"drain"}, args[:1]...),
				append([]string{"--url", d.URL, "--data-dir", dir}, args[1:]...)...)...)
			return out, err
		}

		out, err := cli("start", "--reason", "deploy v2")
		if err != nil || !strings.Contains(out, "started") {
			t.Fatalf("drain start: %v\n%s", err, out)
		}
		if _, err := cli("start", "--reason", "again"); err == nil || !strings.Contains(err.Error(), "drain_running") {
			t.Errorf("a second start: %v, want drain_running", err)
		}
		call(t, "POST", d.URL+"/v1/sessions", op, sessionBody).expect(t, http.StatusServiceUnavailable)

		out, err = cli("status")
		if err != nil || !strings.Contains(out, "ready 0/1  blocking 1") || !strings.Contains(out, present.ShortID(sess.id)+"  ") ||
			!strings.Contains(out, "no_checkpoint_since_drain") || !strings.Contains(out, "TO UNBLOCK") ||
			!strings.Contains(out, "write_checkpoint") || !strings.Contains(out, "note: no forge (--gitea-url) and no webhook secret") {
			t.Errorf("drain status: %v\n%s", err, out)
		}
		out, err = cli("status", "--json")
		var st struct {
			Draining bool
			Counts   checkpointd.DrainCounts
		}
		if err != nil || json.Unmarshal([]byte(out), &st) != nil || !st.Draining || st.Counts.Blocking != 1 {
			t.Errorf("drain status --json: %v\n%s", err, out)
		}
		out, err = cli("complete")
		if err == nil || !strings.Contains(err.Error(), "drain blocked: 1 of 1") || !strings.Contains(out, present.ShortID(sess.id)) {
			t.Errorf("drain complete while blocked: %v\n%s", err, out)
		}
		out, err = cli("status", "--wait", "--timeout", "300ms", "--interval", "50ms")
		if err == nil || !strings.Contains(err.Error(), "not ready after") || !strings.Contains(out, "blocking 1") {
			t.Errorf("status --wait timing out: %v\n%s", err, out)
		}

		// The agent checkpoints and the forge confirms its head while the
		// operator waits.
		side := storetest.OpenURL(t, sideURL(dir, dbURL), checkpointd.SystemClock{})
		go func() {
			time.Sleep(200 * time.Millisecond)
			if r, err := tryCall(apiClient, "POST", d.URL+"/v1/sessions/"+sess.id+"/checkpoints", op, checkpointDoc(sess, "final")); err != nil || r.status != http.StatusCreated {
				t.Errorf("checkpoint during the drain: %v %s", err, r.raw)
			}
			if _, err := side.Observe(t.Context(), []checkpointd.Observation{{Repo: "acme/widgets", Branch: "fix-12",
				Head: "0123456789abcdef0123456789abcdef01234567", Authoritative: true, Source: "test"}}); err != nil {
				t.Error(err)
			}
		}()
		out, err = cli("status", "--wait", "--timeout", "20s", "--interval", "50ms")
		if err != nil || !strings.Contains(out, "ready 1/1  blocking 0") || !strings.Contains(out, "is ready") {
			t.Fatalf("status --wait: %v\n%s", err, out)
		}
		out, err = cli("complete")
		if err != nil || !strings.Contains(out, "completed: all 1 active sessions") {
			t.Fatalf("drain complete: %v\n%s", err, out)
		}
		call(t, "POST", d.URL+"/v1/sessions", op, sessionBody).expect(t, http.StatusServiceUnavailable)

		// A restart lifts the completed drain.
		if err := d.stop(); err != nil {
			t.Fatal(err)
		}
		d = startServe(t, environ{}, storeArgs(dir, dbURL)...)
		r := call(t, "POST", d.URL+"/v1/sessions", op, sessionBody).expect(t, http.StatusCreated)
		if r.header.Get("Checkpointd-Drain") != "" {
			t.Error("drain header after the restart lifted the drain")
		}

		// A restart keeps a running drain; cancel ends it.
		if _, err := cli("start", "--reason", "second"); err != nil {
			t.Fatal(err)
		}
		if err := d.stop(); err != nil {
			t.Fatal(err)
		}
		d = startServe(t, environ{}, storeArgs(dir, dbURL)...)
		r = call(t, "POST", d.URL+"/v1/sessions", op, sessionBody).expect(t, http.StatusServiceUnavailable)
		if r.header.Get("Checkpointd-Drain") != "draining" {
			t.Error("no drain header after a restart during a drain")
		}
		out, err = cli("cancel")
		if err != nil || !strings.Contains(out, "cancelled") {
			t.Fatalf("drain cancel: %v\n%s", err, out)
		}
		out, err = cli("status")
		if err != nil || !strings.Contains(out, ": cancelled at ") || strings.Contains(out, "since") {
			t.Errorf("status of a cancelled drain: %v\n%s", err, out)
		}
		if _, err := cli("cancel"); err == nil || !strings.Contains(err.Error(), "404") {
			t.Errorf("cancel without a drain: %v", err)
		}
		if _, err := cli("status", "--token", "not-a-token"); err == nil || !strings.Contains(err.Error(), "401") {
			t.Errorf("status with a bad token: %v", err)
		}
	})
}

// sideURL is the database a test opens beside the daemon.
func sideURL(dir, dbURL string) string {
	if dbURL != "" {
		return dbURL
	}
	return filepath.Join(dir, "checkpointd.db")
}

// TestServeRunsTheDrainPasses: serve runs the drain's background passes.
// A session whose complete, valid checkpoint predates the drain blocks it
// from the start, and within seconds the reset pass has moved it (the log
// says so) with the status unchanged; once it wrote again, the vouch pass
// reads its checkpoint back, and after the completion its log records it.
func TestServeRunsTheDrainPasses(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		dir, dbURL := t.TempDir(), backendURL(t, b)
		d := startServe(t, environ{}, storeArgs(dir, dbURL)...)
		op := readSecret(t, tokenPath(dir))
		sess := newSession(t, d.URL, op)
		call(t, "POST", d.URL+"/v1/sessions/"+sess.id+"/checkpoints", op, checkpointDoc(sess, "before")).expect(t, http.StatusCreated)
		side := storetest.OpenURL(t, sideURL(dir, dbURL), checkpointd.SystemClock{})
		if _, err := side.Observe(t.Context(), []checkpointd.Observation{{Repo: "acme/widgets", Branch: "fix-12",
			Head: "0123456789abcdef0123456789abcdef01234567", Authoritative: true, Source: "test"}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond) // the start comes strictly after the checkpoint
		call(t, "POST", d.URL+"/v1/drain", op, map[string]any{"reason": "deploy"}).expect(t, http.StatusCreated)
		status := func() string {
			return string(call(t, "GET", d.URL+"/v1/drain", op, nil).expect(t, http.StatusOK).raw)
		}
		first := status()
		if !strings.Contains(first, `"blocking":1`) || !strings.Contains(first, "no_checkpoint_since_drain") {
			t.Fatalf("status right after the start: %s", first)
		}
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(d.stderr.String(), `msg="drain: sessions written before the drain reset" count=1`) {
			if time.Now().After(deadline) {
				t.Fatalf("no reset pass within 10s; log:\n%s", d.stderr.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		if after := status(); after != first {
			t.Errorf("the reset changed the status:\nbefore %s\nafter  %s", first, after)
		}
		// Written since: the drain pass reads it back ahead of the
		// completion, which the session's log then records.
		call(t, "POST", d.URL+"/v1/sessions/"+sess.id+"/checkpoints", op, checkpointDoc(sess, "after")).expect(t, http.StatusCreated)
		awaitLog := func(line string) {
			t.Helper()
			for deadline := time.Now().Add(10 * time.Second); !strings.Contains(d.stderr.String(), line); time.Sleep(50 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("no %q within 10s; log:\n%s", line, d.stderr.String())
				}
			}
		}
		awaitLog(`msg="drain: latest checkpoints read back for the completion" count=1`)
		call(t, "POST", d.URL+"/v1/drain/complete", op, nil).expect(t, http.StatusOK)
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			evs := string(call(t, "GET", d.URL+"/v1/sessions/"+sess.id+"/events", op, nil).expect(t, http.StatusOK).raw)
			if strings.Contains(evs, `"drain.completed"`) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no drain.completed in the log within 10s: %s", evs)
			}
		}
	})
}
