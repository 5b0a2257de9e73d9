package api_test

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/api"
	"github.com/checkpointd/checkpointd/metrics"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// metric returns the exposition line of name (with its labels), or "".
func (w *watchServer) metric(name string) string {
	rec := httptest.NewRecorder()
	w.metrics.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if strings.HasPrefix(line, name+" ") {
			return line
		}
	}
	return ""
}

// eventually polls cond for up to 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("not within 5s: %s", what)
}

// TestWatchAcrossReplicas: two daemons on one PostgreSQL; a change made
// through A reaches a watcher on B within a second (LISTEN/NOTIFY, rows
// read from the database), and one made through B reaches A's.
func TestWatchAcrossReplicas(t *testing.T) {
	url := storetest.URL(t, storetest.Postgres)
	a := newWatchServer(t, storetest.OpenURL(t, url, checkpointd.SystemClock{}), nil)
	b := newWatchServer(t, storetest.OpenURL(t, url, checkpointd.SystemClock{}), nil)
	onB := b.watch(b.operator, "", "")
	onA := a.watch(a.operator, "", "")
	sess := a.agentSession("a", "acme/widgets", "author", "fix-a")
	for i := range 3 {
		start := time.Now()
		a.checkpoint(sess, sess.doc("0123456789abcdef0123456789abcdef01234567")).expect(t, 201, "")
		e := onB.until(func(e sseEvent) bool { return e.Type == "checkpoint" })
		if took := time.Since(start); took > time.Second {
			t.Errorf("write %d on A reached B after %s, want < 1s", i, took)
		}
		if d := e[len(e)-1].json(t); d["seq"] != float64(i+1) {
			t.Errorf("event on B %v, want checkpoint %d", d, i+1)
		}
	}
	start := time.Now()
	b.do("POST", "/v1/drain", b.operator, map[string]any{"reason": "deploy"}).expect(t, 201, "")
	onA.until(isType("drain", "started"))
	if took := time.Since(start); took > time.Second {
		t.Errorf("a drain started on B reached A after %s", took)
	}
}

// smallBuffers makes every accepted connection's send buffer small, so a
// client that stops reading blocks the server's writes after a few events
// rather than megabytes.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(2048)
	}
	return c, err
}

// TestWatchStuckClient: a client that never reads is dropped within a
// bounded time (its buffer fills, then its blocked write times out);
// writers never wait for it and another watcher gets every change.
func TestWatchStuckClient(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		st := storetest.Open(t, b, checkpointd.SystemClock{})
		stop := make(chan struct{})
		w := &watchServer{stop: stop}
		w.metrics = metrics.New()
		w.harness = newDrainHarness(t, st, st, func(d *api.Deps) {
			d.WatchStop, d.Metrics, d.WatchBuffer, d.WatchWriteTimeout = stop, w.metrics, 400, 300*time.Millisecond
		})
		w.srv = httptest.NewUnstartedServer(w.handler)
		w.srv.Listener = smallBuffers{w.srv.Listener}
		w.srv.Start()
		t.Cleanup(func() { w.shutdown(); w.srv.Close() })

		healthy := w.watch(w.operator, "", "")
		stuck, err := net.Dial("tcp", w.srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer stuck.Close()
		_ = stuck.(*net.TCPConn).SetReadBuffer(2048)
		fmt.Fprintf(stuck, "GET /v1/watch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", w.operator)
		eventually(t, "two watchers", func() bool { return w.metric("checkpointd_watchers") == "checkpointd_watchers 2" })

		const sessions = 150
		start := time.Now()
		var slowest time.Duration
		for i := range sessions {
			t0 := time.Now()
			w.do("POST", "/v1/sessions", w.operator, map[string]any{"repo": "acme/widgets", "role": "author",
				"branch": fmt.Sprintf("fix-%d-%s", i, strings.Repeat("x", 200)), "agent": map[string]any{"runtime": "claude-code"}}).expect(t, 201, "")
			slowest = max(slowest, time.Since(t0))
		}
		if slowest > 2*time.Second {
			t.Errorf("the slowest session create took %s with a stuck watcher", slowest)
		}
		got := 0
		for got < 2*sessions {
			e, ok := healthy.next(5 * time.Second)
			if !ok {
				t.Fatalf("the healthy watcher stalled after %d of %d events", got, 2*sessions)
			}
			if e.Type == "session" || e.Type == "run" {
				got++
			}
		}
		eventually(t, "the stuck watcher dropped", func() bool { return w.metric("checkpointd_watchers") == "checkpointd_watchers 1" })
		t.Logf("%d creates in %s; stuck client dropped", sessions, time.Since(start))
		// Not asserted: checkpointd_watch_dropped_total. Here net/http
		// cancels the stuck stream's request itself (its connection
		// failed), which the handler cannot tell from a client that left.
	})
}

// TestWatchKeepAliveAndShutdown: an idle stream gets keep-alive comments;
// the watchers gauge counts open streams; closing WatchStop (the server's
// shutdown) ends every stream at once.
func TestWatchKeepAliveAndShutdown(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		w := newWatchServer(t, storetest.Open(t, b, checkpointd.SystemClock{}), func(d *api.Deps) {
			d.WatchKeepAlive = 50 * time.Millisecond
		})
		s1 := w.watch(w.operator, "", "")
		s2 := w.watch(w.reader, "?repo=acme/*", "")
		if e, ok := s1.nextAny(2 * time.Second); !ok || e.Comment != "keep-alive" {
			t.Fatalf("idle stream: %+v, want a keep-alive comment", e)
		}
		eventually(t, "gauge 2", func() bool { return w.metric("checkpointd_watchers") == "checkpointd_watchers 2" })
		s2.close()
		eventually(t, "gauge 1", func() bool { return w.metric("checkpointd_watchers") == "checkpointd_watchers 1" })

		w.shutdown()
		deadline := time.After(2 * time.Second)
		for {
			select {
			case _, ok := <-s1.events:
				if !ok {
					eventually(t, "gauge 0", func() bool { return w.metric("checkpointd_watchers") == "checkpointd_watchers 0" })
					return
				}
			case <-deadline:
				t.Fatal("the stream did not end within 2s of the shutdown")
			}
		}
	})
}

// TestWatchOutlivesReadTimeout: serve's http.Server has a ReadTimeout for
// reading requests; a stream must not be cut when that time is up (net/http
// clears the deadline once the request is read; the stream clears it too).
func TestWatchOutlivesReadTimeout(t *testing.T) {
	st := storetest.Open(t, storetest.SQLite, checkpointd.SystemClock{})
	stop := make(chan struct{})
	w := &watchServer{stop: stop, metrics: metrics.New()}
	w.harness = newDrainHarness(t, st, st, func(d *api.Deps) { d.WatchStop, d.Metrics = stop, w.metrics })
	w.srv = httptest.NewUnstartedServer(w.handler)
	w.srv.Config.ReadTimeout = 100 * time.Millisecond
	w.srv.Start()
	t.Cleanup(func() { w.shutdown(); w.srv.Close() })
	s := w.watch(w.operator, "", "")
	time.Sleep(300 * time.Millisecond)
	w.agentSession("a", "acme/widgets", "author", "fix-a")
	if e, ok := s.next(2 * time.Second); !ok || e.Type != "session" {
		t.Fatalf("after the read timeout: %+v (ok %v), want the session event", e, ok)
	}
}

// heldWakeups is a real store whose feed reader is woken only when the
// test says: the replica's reader stays behind the others meanwhile.
type heldWakeups struct {
	*store.Store
	wake chan struct{}
}

func (h heldWakeups) FeedWakeups(context.Context) (<-chan struct{}, error) { return h.wake, nil }

// TestWatchResumeAheadOfReader: a client resumes on replica A with an id
// replica B gave it, while A's feed reader is behind that id. When A's
// reader catches up it hands on changes the client already has: the
// client gets none of them again, and the newer ones once.
func TestWatchResumeAheadOfReader(t *testing.T) {
	url := storetest.URL(t, storetest.Postgres)
	sa := storetest.OpenURL(t, url, checkpointd.SystemClock{})
	held := heldWakeups{Store: sa, wake: make(chan struct{}, 1)}
	a := &watchServer{stop: make(chan struct{}), metrics: metrics.New()}
	a.harness = newDrainHarness(t, sa, held, func(d *api.Deps) { d.WatchStop = a.stop })
	a.srv = httptest.NewServer(a.handler)
	t.Cleanup(func() { a.shutdown(); a.srv.Close() })
	b := newWatchServer(t, storetest.OpenURL(t, url, checkpointd.SystemClock{}), nil)

	a.watch(a.operator, "", "") // A's reader starts here, and stays
	onB := b.watch(b.operator, "", "")
	sess := b.agentSession("a", "acme/widgets", "author", "fix-a")
	onB.until(isType("run", "started"))
	b.checkpoint(sess, sess.doc("0123456789abcdef0123456789abcdef01234567")).expect(t, 201, "")
	got := onB.until(func(e sseEvent) bool { return e.Type == "checkpoint" })
	id := got[len(got)-1].ID
	b.do("POST", "/v1/sessions/"+sess.id+"/end", b.operator, map[string]any{"outcome": "abandoned"}).expect(t, 200, "")

	r := a.watch(a.operator, "", id)
	held.wake <- struct{}{}
	labels := map[string]string{sess.id: "A"}
	e, ok := r.next(5 * time.Second)
	if !ok || summary(t, e, labels) != "session/ended A" {
		t.Fatalf("first event after resuming on the lagging replica: %+v, want session/ended A", e)
	}
	if e, quiet := r.quiet(300 * time.Millisecond); !quiet {
		t.Fatalf("a duplicate: %+v", e)
	}
}
