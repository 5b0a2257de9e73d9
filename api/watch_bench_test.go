package api_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/api"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// benchDaemon is the API on a real server for benchmarks (the harness
// wants a *testing.T).
type benchDaemon struct {
	srv   *httptest.Server
	token string
	stop  chan struct{}
}

func newBenchDaemon(b *testing.B, backend storetest.Backend) *benchDaemon {
	b.Helper()
	s := storetest.Open(b, backend, checkpointd.SystemClock{})
	d := &benchDaemon{stop: make(chan struct{}), token: checkpointd.NewTokenSecret()}
	if _, err := s.CreateToken(b.Context(), "op", checkpointd.RoleOperator, nil, checkpointd.HashToken(d.token)); err != nil {
		b.Fatal(err)
	}
	d.srv = httptest.NewServer(api.New(api.Deps{Store: s, Workflow: checkpointd.DefaultWorkflow(), DigestKey: testDigestKey,
		WatchStop: d.stop}))
	d.srv.Client().Transport.(*http.Transport).MaxIdleConnsPerHost = 64
	b.Cleanup(func() { close(d.stop); d.srv.Close() })
	return d
}

func (d *benchDaemon) post(b *testing.B, path string, body any) map[string]any {
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", d.srv.URL+path, bytes.NewReader(raw))
	req.Header.Set("Authorization", "Bearer "+d.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.srv.Client().Do(req)
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
// checkpoint event on arrivals. It returns once all have joined.
func (d *benchDaemon) openWatchers(b *testing.B, n int, query string, arrivals chan<- time.Time) {
	b.Helper()
	var joined sync.WaitGroup
	for range n {
		joined.Add(1)
		req, _ := http.NewRequest("GET", d.srv.URL+"/v1/watch"+query, nil)
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
