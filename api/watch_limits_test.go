package api_test

import (
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/api"
	"github.com/checkpointd/checkpointd/metrics"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestWatchStreamCaps: past the streams one token may hold, or a replica
// serves, a new stream is 429 too_many_watchers with Retry-After; a
// stream that ends makes room again.
func TestWatchStreamCaps(t *testing.T) {
	st := storetest.Open(t, storetest.SQLite, checkpointd.SystemClock{})
	w := newWatchServer(t, st, func(d *api.Deps) { d.WatchStreamsPerToken, d.WatchStreams = 2, 3 })
	refused := func(token, why string) {
		t.Helper()
		resp, cancel := w.request(token, "", "")
		defer cancel()
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 429 || !strings.Contains(string(body), `"code":"too_many_watchers"`) || resp.Header.Get("Retry-After") != "5" {
			t.Fatalf("%s: %d Retry-After %q %s", why, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
		if !strings.Contains(string(body), why) {
			t.Errorf("the refusal does not say why (%s): %s", why, body)
		}
	}
	first := w.watch(w.operator, "", "")
	w.watch(w.operator, "", "")
	refused(w.operator, "a token may hold 2")
	w.watch(w.reader, "", "")
	refused(w.agent, "this replica serves 3")
	first.close()
	eventually(t, "the closed stream gone", func() bool { return w.metric("checkpointd_watchers") == "checkpointd_watchers 2" })
	w.watch(w.agent, "", "")
}

// TestWatchMemoryBudgetFreesAStalledStream: a client that stops reading
// while changes pile up is dropped once the queues pass the memory budget,
// with memory_budget, at once — not after its blocked write times out —
// and a watcher that reads gets every change.
func TestWatchMemoryBudgetFreesAStalledStream(t *testing.T) {
	st := storetest.Open(t, storetest.SQLite, checkpointd.SystemClock{})
	stop := make(chan struct{})
	w := &watchServer{stop: stop, metrics: metrics.New()}
	w.harness = newDrainHarness(t, st, st, func(d *api.Deps) {
		d.WatchStop, d.Metrics, d.WatchMemory, d.WatchWriteTimeout = stop, w.metrics, 64<<10, time.Minute
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
	go func() {
		for i := range sessions {
			w.do("POST", "/v1/sessions", w.operator, map[string]any{"repo": "acme/widgets", "role": "author",
				"branch": fmt.Sprintf("fix-%d-%s", i, strings.Repeat("x", 200)), "agent": map[string]any{"runtime": "claude-code"}})
		}
	}()
	for got := 0; got < 2*sessions; {
		e, ok := healthy.next(5 * time.Second)
		if !ok {
			t.Fatalf("the healthy watcher stalled after %d of %d events", got, 2*sessions)
		}
		if e.Type == "session" || e.Type == "run" {
			got++
		}
	}
	// The write timeout is a minute: only the drop's abort ends it sooner.
	eventually(t, "the stalled stream dropped", func() bool { return w.metric("checkpointd_watchers") == "checkpointd_watchers 1" })
	// The stream is counted dropped as its handler ends, which may be just
	// after the gauge fell.
	eventually(t, "the drop counted", func() bool {
		return w.metric(`checkpointd_watch_dropped_total{reason="memory_budget"}`) == `checkpointd_watch_dropped_total{reason="memory_budget"} 1`
	})
}
