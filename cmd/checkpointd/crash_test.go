package main

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd/store/storetest"
)

// buildBinary compiles cmd/checkpointd once for the whole test binary;
// TestMain removes it.
func buildBinary(t *testing.T) string {
	t.Helper()
	built.once.Do(func() { built.path, built.err = compileDaemon() })
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
}

var built struct {
	once sync.Once
	path string
	err  error
}

func compileDaemon() (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "checkpointd-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "checkpointd")
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(goBin, "build", "-o", bin, "./cmd/checkpointd")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.path != "" {
		os.RemoveAll(filepath.Dir(built.path))
	}
	os.Exit(code)
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// child is a daemon running as its own process, so it can be killed.
type child struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	URL    string
	exited chan struct{}
}

// startChild runs `checkpointd serve` in a child process with only the
// given CHECKPOINTD_ settings, and waits until it is ready.
func startChild(t *testing.T, bin string, args ...string) *child {
	t.Helper()
	c := &child{stderr: &syncBuffer{}, exited: make(chan struct{})}
	c.cmd = exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CHECKPOINTD_") {
			c.cmd.Env = append(c.cmd.Env, kv)
		}
	}
	c.cmd.Stdout, c.cmd.Stderr = c.stderr, c.stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.cmd.Wait(); close(c.exited) }()
	t.Cleanup(func() {
		c.kill(t)
		if t.Failed() {
			t.Logf("log of serve pid %d:\n%s", c.cmd.Process.Pid, c.stderr)
		}
	})

	deadline := time.After(startTimeout)
	for c.URL == "" {
		select {
		case <-c.exited:
			t.Fatalf("serve exited before serving (%v):\n%s", c.cmd.ProcessState, c.stderr)
		case <-deadline:
			t.Fatalf("serve did not log its address within %v:\n%s", startTimeout, c.stderr)
		case <-time.After(10 * time.Millisecond):
			if m := servingRE.FindStringSubmatch(c.stderr.String()); m != nil {
				c.URL = "http://" + m[1]
			}
		}
	}
	waitReady(t, c.URL)
	return c
}

// kill sends SIGKILL: no shutdown code runs, as in a power cut of the
// process. It waits until the process is gone.
func (c *child) kill(t *testing.T) {
	select {
	case <-c.exited:
		return
	default:
	}
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("kill: %v", err)
	}
	select {
	case <-c.exited:
	case <-time.After(stopTimeout):
		t.Errorf("pid %d still running %v after SIGKILL", c.cmd.Process.Pid, stopTimeout)
	}
}

// ack is one checkpoint write the daemon acknowledged with 201.
type ack struct {
	seq    int64
	digest string
}

// TestCrashKeepsAcknowledgedCheckpoints proves "acknowledged means
// durable": checkpoints written by concurrent writers and acknowledged
// with 201 survive a SIGKILL of the daemon mid-write, each readable with
// the digest it was acknowledged with, and the stored seqs run 1..latest
// without gaps or duplicates.
func TestCrashKeepsAcknowledgedCheckpoints(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test builds and kills a real daemon")
	}
	bin := buildBinary(t)
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		dir, dbURL := t.TempDir(), backendURL(t, b)
		args := storeArgs(dir, dbURL)
		d := startChild(t, bin, args...)
		operator := readSecret(t, tokenPath(dir))
		s := newSession(t, d.URL, operator)

		acks, failures := writeUntilKilled(t, d, s, operator)
		if len(acks) == 0 {
			t.Fatal("no write was acknowledged before the kill")
		}
		t.Logf("%s: %d checkpoints acknowledged, %d writers cut off by SIGKILL", b, len(acks), failures)

		d = startChild(t, bin, args...)
		latest := call(t, "GET", d.URL+"/v1/sessions/"+s.id+"/checkpoints/latest", operator, nil).expect(t, http.StatusOK)
		n := latest.num("checkpoint", "seq")
		stored := listDigests(t, d.URL, s.id, operator)
		if int64(len(stored)) != n {
			t.Errorf("%d checkpoints stored, latest seq %d: the seqs have gaps or duplicates", len(stored), n)
		}
		for seq := int64(1); seq <= n; seq++ {
			if _, ok := stored[seq]; !ok {
				t.Errorf("seq %d missing from 1..%d", seq, n)
			}
		}

		seen := map[int64]bool{}
		for _, a := range acks {
			if seen[a.seq] {
				t.Errorf("seq %d acknowledged twice", a.seq)
			}
			seen[a.seq] = true
			if a.seq < 1 || a.seq > n {
				t.Errorf("acknowledged seq %d lost: latest after restart is %d", a.seq, n)
				continue
			}
			if stored[a.seq] != a.digest {
				t.Errorf("seq %d: stored digest %q, acknowledged %q", a.seq, stored[a.seq], a.digest)
			}
		}
		readAcked(t, d.URL, s.id, operator, acks)

		// The session is writable after the crash, and continues the seqs.
		r := call(t, "POST", d.URL+"/v1/sessions/"+s.id+"/checkpoints", operator, checkpointDoc(s, "after the crash")).expect(t, http.StatusCreated)
		if got := r.num("checkpoint", "seq"); got != n+1 {
			t.Errorf("first seq after the restart %d, want %d", got, n+1)
		}
	})
}

// writeUntilKilled runs 8 writers back to back and SIGKILLs the daemon
// after 1.5s. It returns every 201 and how many writers the kill cut off.
func writeUntilKilled(t *testing.T, d *child, s session, token string) ([]ack, int) {
	t.Helper()
	const writers = 8
	client := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: writers, DisableCompression: true},
	}
	defer client.CloseIdleConnections()
	var (
		mu       sync.Mutex
		inFlight atomic.Int64
		acks     []ack
		cutOff   int
		// unavailable counts 503s, which acknowledge nothing.
		unavailable int
		wg          sync.WaitGroup
		stop        = make(chan struct{})
		endpoint    = d.URL + "/v1/sessions/" + s.id + "/checkpoints"
	)
	for w := range writers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				inFlight.Add(1)
				r, err := tryCall(client, "POST", endpoint, token, checkpointDoc(s, fmt.Sprintf("writer %d write %d", w, i)))
				inFlight.Add(-1)
				more := false
				mu.Lock()
				switch {
				case err != nil:
					cutOff++
				case r.status == http.StatusCreated:
					acks = append(acks, ack{seq: r.num("checkpoint", "seq"), digest: r.str("checkpoint", "digest")})
					more = true
				case r.status == http.StatusServiceUnavailable && r.str("code") == "store_unavailable":
					// Not an acknowledgement, and not what this test is
					// about: a database short of connections (other test
					// processes share it) may refuse a write; try again.
					unavailable++
					more = true
				default:
					// A killed process answers nothing, so any answer is the
					// daemon's own and a write must not fail under load.
					t.Errorf("writer %d: status %d: %s", w, r.status, r.raw)
				}
				mu.Unlock()
				if !more {
					return
				}
			}
		})
	}
	time.Sleep(1500 * time.Millisecond)
	if n := inFlight.Load(); n == 0 {
		t.Error("no write in flight when the daemon was killed")
	}
	d.kill(t)
	// Writers end on their first failed request; stop bounds the rest.
	close(stop)
	wg.Wait()
	if unavailable > 0 {
		t.Logf("%d writes answered 503 store_unavailable (not acknowledged)", unavailable)
	}
	return acks, cutOff
}

// listDigests pages through the session's history: seq → digest.
func listDigests(t *testing.T, base, id, token string) map[int64]string {
	t.Helper()
	out := map[int64]string{}
	cursor := ""
	for {
		u := base + "/v1/sessions/" + id + "/checkpoints?limit=500"
		if cursor != "" {
			u += "&cursor=" + url.QueryEscape(cursor)
		}
		r := call(t, "GET", u, token, nil).expect(t, http.StatusOK)
		items, _ := r.get("items").([]any)
		for _, it := range items {
			m, _ := it.(map[string]any)
			seq, _ := m["seq"].(float64)
			digest, _ := m["digest"].(string)
			if _, dup := out[int64(seq)]; dup {
				t.Errorf("seq %v listed twice", seq)
			}
			out[int64(seq)] = digest
		}
		cursor = r.str("next_cursor")
		if cursor == "" || len(items) == 0 {
			return out
		}
	}
}

// readAcked reads every acknowledged checkpoint by its seq, four at a time.
func readAcked(t *testing.T, base, id, token string, acks []ack) {
	t.Helper()
	var wg sync.WaitGroup
	next := make(chan ack)
	for range 4 {
		wg.Go(func() {
			for a := range next {
				r, err := tryCall(apiClient, "GET", fmt.Sprintf("%s/v1/sessions/%s/checkpoints/%d", base, id, a.seq), token, nil)
				switch {
				case err != nil:
					t.Errorf("read seq %d: %v", a.seq, err)
				case r.status != http.StatusOK:
					t.Errorf("read acknowledged seq %d: status %d: %s", a.seq, r.status, r.raw)
				case r.str("checkpoint", "digest") != a.digest || r.num("checkpoint", "seq") != a.seq:
					t.Errorf("seq %d read back as seq %d digest %q, acknowledged digest %q",
						a.seq, r.num("checkpoint", "seq"), r.str("checkpoint", "digest"), a.digest)
				}
			}
		})
	}
	for _, a := range acks {
		next <- a
	}
	close(next)
	wg.Wait()
}
