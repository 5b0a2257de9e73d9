package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/api"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// benchDaemon is the API on a real server for benchmarks (the harness
// wants a *testing.T).
type benchDaemon struct {
	url    string
	client *http.Client
	token  string
	stop   chan struct{}
}

func newBenchDaemon(b *testing.B, backend storetest.Backend) *benchDaemon {
	b.Helper()
	s := storetest.Open(b, backend, checkpointd.SystemClock{})
	d := &benchDaemon{stop: make(chan struct{}), token: checkpointd.NewTokenSecret()}
	if _, err := s.CreateToken(b.Context(), checkpointd.TokenSpec{Name: "op", Role: checkpointd.RoleOperator}, checkpointd.HashToken(d.token)); err != nil {
		b.Fatal(err)
	}
	// One token opens every stream here: the per-token cap is lifted.
	srv := httptest.NewServer(api.New(api.Deps{Store: api.StoresOf(s), Workflow: checkpointd.DefaultWorkflow(), DigestKey: testDigestKey,
		WatchStop: d.stop, WatchStreamsPerToken: 10_000}))
	srv.Client().Transport.(*http.Transport).MaxIdleConnsPerHost = 64
	d.url, d.client = srv.URL, srv.Client()
	b.Cleanup(func() { close(d.stop); srv.Close() })
	return d
}

func (d *benchDaemon) post(b *testing.B, path string, body any) map[string]any {
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", d.url+path, bytes.NewReader(raw))
	req.Header.Set("Authorization", "Bearer "+d.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	if resp.StatusCode/100 != 2 {
		b.Fatalf("POST %s: %d %v", path, resp.StatusCode, out)
	}
	return out
}

// openWatchers opens n streams; each sends the arrival time of every
// checkpoint event on arrivals. It returns once all have joined, with a
// function that closes them.
func (d *benchDaemon) openWatchers(b *testing.B, n int, query string, arrivals chan<- time.Time) (closeAll func()) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var joined sync.WaitGroup
	for range n {
		joined.Add(1)
		req, _ := http.NewRequestWithContext(ctx, "GET", d.url+"/v1/watch"+query, nil)
		req.Header.Set("Authorization", "Bearer "+d.token)
		resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
		if err != nil || resp.StatusCode != 200 {
			b.Fatalf("watch: %v %v", resp, err)
		}
		go func() {
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			first := true
			for sc.Scan() {
				line := sc.Text()
				if first && line == ": watching" {
					first = false
					joined.Done()
				}
				if arrivals != nil && line == "event: checkpoint" {
					arrivals <- time.Now()
				}
			}
		}()
	}
	joined.Wait()
	return cancel
}

func (d *benchDaemon) session(b *testing.B) (string, map[string]any) {
	s := d.post(b, "/v1/sessions", sessionBody)
	sess, run := s["session"].(map[string]any), s["run"].(map[string]any)
	return sess["id"].(string), checkpointDoc(run["id"].(string), int64(run["fencing_token"].(float64)))
}

// BenchmarkWatchFanout: 1,000 watchers, one checkpoint write fanned out to
// all of them; reports the p50/p99 time from the write's answer to each
// watcher's receipt.
func BenchmarkWatchFanout(b *testing.B) {
	for _, backend := range []storetest.Backend{storetest.SQLite, storetest.Postgres} {
		b.Run(string(backend), func(b *testing.B) {
			if backend == storetest.Postgres {
				storetest.RequirePostgres(b)
			}
			const watchers = 1000
			d := newBenchDaemon(b, backend)
			arrivals := make(chan time.Time, watchers*4)
			d.openWatchers(b, watchers, "", arrivals)
			id, doc := d.session(b)
			var lat []time.Duration
			b.ResetTimer()
			for i := range b.N {
				doc["note"] = fmt.Sprint(i)
				d.post(b, "/v1/sessions/"+id+"/checkpoints", doc)
				sent := time.Now()
				for range watchers {
					select {
					case at := <-arrivals:
						lat = append(lat, max(at.Sub(sent), 0))
					case <-time.After(10 * time.Second):
						b.Fatal("a watcher did not get the change within 10s")
					}
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}

// BenchmarkCheckpointWriteWatchers: the checkpoint write path with no
// watcher, with 1,000 idle ones (they watch another repo: the feed reader
// still reads every change and matches it against each), and with 1,000
// that each receive every write (their streams share the benchmark's CPU
// with the writer: this measures the machine, not a wait).
func BenchmarkCheckpointWriteWatchers(b *testing.B) {
	for _, backend := range []storetest.Backend{storetest.SQLite, storetest.Postgres} {
		for _, w := range []struct {
			name  string
			n     int
			query string
		}{{"none", 0, ""}, {"1000-idle", 1000, "?repo=other/*"}, {"1000-receiving", 1000, ""}} {
			b.Run(fmt.Sprintf("%s/watchers=%s", backend, w.name), func(b *testing.B) {
				if backend == storetest.Postgres {
					storetest.RequirePostgres(b)
				}
				d := newBenchDaemon(b, backend)
				d.openWatchers(b, w.n, w.query, nil)
				id, doc := d.session(b)
				var lat []time.Duration
				b.ResetTimer()
				for i := range b.N {
					doc["note"] = strings.Repeat("x", i%7) + fmt.Sprint(i)
					t0 := time.Now()
					d.post(b, "/v1/sessions/"+id+"/checkpoints", doc)
					lat = append(lat, time.Since(t0))
				}
				b.StopTimer()
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
			})
		}
	}
}

// BenchmarkWatchStalledStreams: the daemon's write rate and memory under
// write load with 1,000 live streams (each on its own idle session, as an
// agent watches its own) and 300 that watch everything and never read,
// against the same load with no stream before and after. The daemon runs as a process of
// its own (this test binary in daemon mode), so its RSS is its alone. It
// reports write-ratio (the rate with the streams over the rate without;
// the aim is within 10 %) and rss-growth-MiB (the daemon's largest RSS
// during the load over its RSS after the same load without streams; bound
// 128 MiB, which fails the benchmark).
func BenchmarkWatchStalledStreams(b *testing.B) {
	for _, backend := range []storetest.Backend{storetest.SQLite, storetest.Postgres} {
		b.Run(string(backend), func(b *testing.B) {
			if backend == storetest.Postgres {
				storetest.RequirePostgres(b)
			}
			for range b.N {
				d, pid := newChildDaemon(b, backend)
				const writers = 8
				// Each phase writes to sessions of its own: rows a phase
				// updated thousands of times (dead tuples on PostgreSQL) do
				// not slow the next one.
				load := func(span time.Duration) float64 {
					docs := make([]struct {
						id  string
						doc map[string]any
					}, writers)
					for i := range docs {
						docs[i].id, docs[i].doc = d.session(b)
					}
					start := time.Now()
					var wg sync.WaitGroup
					var writes atomic.Int64
					for w := range writers {
						wg.Go(func() {
							for i := 0; time.Since(start) < span; i++ {
								doc := maps.Clone(docs[w].doc)
								doc["note"] = fmt.Sprint(i, strings.Repeat("x", 300))
								d.post(b, "/v1/sessions/"+docs[w].id+"/checkpoints", doc)
								writes.Add(1)
							}
						})
					}
					wg.Wait()
					return float64(writes.Load()) / time.Since(start).Seconds()
				}
				load(2 * time.Second) // warm: caches, prepared statements
				without := load(15 * time.Second)
				before := rssOf(b, pid)

				idle := make([]string, 1000)
				for i := range idle {
					idle[i], _ = d.session(b)
				}
				var closers []func()
				for _, id := range idle {
					closers = append(closers, d.openWatchers(b, 1, "?session="+id, nil))
				}
				var stalled []net.Conn
				for range 300 {
					c, err := net.Dial("tcp", strings.TrimPrefix(d.url, "http://"))
					if err != nil {
						b.Fatal(err)
					}
					_ = c.(*net.TCPConn).SetReadBuffer(4096)
					fmt.Fprintf(c, "GET /v1/watch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", d.token)
					stalled = append(stalled, c)
				}
				peak := before
				done, sampled := make(chan struct{}), make(chan struct{})
				go func() {
					defer close(sampled)
					for {
						peak = max(peak, rssOf(b, pid))
						select {
						case <-done:
							return
						case <-time.After(20 * time.Millisecond):
						}
					}
				}()
				with := load(15 * time.Second)
				close(done)
				<-sampled
				for _, c := range stalled {
					c.Close()
				}
				for _, c := range closers {
					c()
				}
				// Alone again: the rate without streams is the mean of the
				// phases before and after, so a drift of the machine or
				// the database during the run does not read as their cost.
				time.Sleep(time.Second)
				again := load(15 * time.Second)
				growth := float64(peak-before) / (1 << 20)
				b.ReportMetric(with/((without+again)/2), "write-ratio")
				b.ReportMetric(without, "writes/s-alone")
				b.ReportMetric(again, "writes/s-alone-after")
				b.ReportMetric(with, "writes/s-watched")
				b.ReportMetric(growth, "rss-growth-MiB")
				if growth > 128 {
					b.Errorf("the daemon's RSS grew by %.0f MiB with 1,300 streams (bound 128 MiB)", growth)
				}
			}
		})
	}
}

// childDaemonEnv, set, makes this test binary serve the API on the store
// at its value instead of running tests (TestMain): a daemon in a process
// of its own, whose memory a benchmark can read.
const childDaemonEnv = "CHECKPOINTD_TEST_CHILD_DAEMON_STORE"

// newChildDaemon starts the child daemon on a fresh store and returns a
// client for it and its pid.
func newChildDaemon(b *testing.B, backend storetest.Backend) (*benchDaemon, int) {
	b.Helper()
	url := storetest.URL(b, backend)
	s := storetest.OpenURL(b, url, checkpointd.SystemClock{})
	d := &benchDaemon{token: checkpointd.NewTokenSecret()}
	if _, err := s.CreateToken(b.Context(), checkpointd.TokenSpec{Name: "op", Role: checkpointd.RoleOperator}, checkpointd.HashToken(d.token)); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childDaemonEnv+"="+url)
	stdin, _ := cmd.StdinPipe() // the child ends when it closes
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatalf("the child daemon did not start: %v", err)
	}
	d.url = "http://" + strings.TrimSpace(strings.TrimPrefix(line, "listening "))
	d.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	return d, cmd.Process.Pid
}

// serveChildDaemon is the child's main: the API on the store at url until
// stdin closes.
func serveChildDaemon(url string) int {
	ctx := context.Background()
	s, err := store.Open(ctx, store.Config{URL: url, Clock: checkpointd.SystemClock{}, Keys: storetest.Keys, MaxConns: storetest.MaxConns})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child daemon:", err)
		return 1
	}
	defer s.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "child daemon:", err)
		return 1
	}
	if path := os.Getenv(childDaemonEnv + "_CPUPROFILE"); path != "" { // to see where the time goes
		f, err := os.Create(path)
		if err == nil && pprof.StartCPUProfile(f) == nil {
			defer pprof.StopCPUProfile()
		}
	}
	stop := make(chan struct{})
	srv := &http.Server{Handler: api.New(api.Deps{Store: api.StoresOf(s), Workflow: checkpointd.DefaultWorkflow(), DigestKey: testDigestKey,
		WatchStop: stop, WatchStreamsPerToken: 10_000}), ConnContext: api.ConnContext}
	go func() { _ = srv.Serve(ln) }()
	fmt.Println("listening", ln.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	close(stop)
	_ = srv.Close()
	return 0
}

// rssOf is a process's resident set in bytes (/proc/<pid>/statm).
func rssOf(b *testing.B, pid int) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/statm", pid))
	if err != nil {
		b.Fatal(err)
	}
	f := strings.Fields(string(raw))
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}
