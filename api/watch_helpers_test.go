package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd/api"
	"github.com/checkpointd/checkpointd/metrics"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/webhook"
)

// watchServer is the real handler on a real HTTP server: a stream needs a
// connection, not a recorder.
type watchServer struct {
	*harness
	srv     *httptest.Server
	metrics *metrics.Metrics
	stop    chan struct{}
	once    sync.Once
}

func newWatchServer(t *testing.T, s *store.Store, set func(*api.Deps)) *watchServer {
	t.Helper()
	w := &watchServer{metrics: metrics.New(), stop: make(chan struct{})}
	w.harness = newDrainHarness(t, s, s, func(d *api.Deps) {
		d.WatchStop, d.Metrics = w.stop, w.metrics
		if set != nil {
			set(d)
		}
	})
	w.srv = httptest.NewServer(w.handler)
	t.Cleanup(func() {
		w.shutdown()
		w.srv.Close()
	})
	return w
}

// shutdown ends every stream, as serve does when the server shuts down.
func (w *watchServer) shutdown() { w.once.Do(func() { close(w.stop) }) }

// sseEvent is one parsed event; a comment has only Comment.
type sseEvent struct {
	ID, Type, Data, Comment string
}

func (e sseEvent) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(e.Data), &m); err != nil {
		t.Fatalf("event %+v: data is not JSON: %v", e, err)
	}
	return m
}

// stream is an open GET /v1/watch.
type stream struct {
	t      *testing.T
	resp   *http.Response
	cancel context.CancelFunc
	events chan sseEvent
	lastID string
}

func (w *watchServer) request(token, query, lastID string) (*http.Response, context.CancelFunc) {
	w.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", w.srv.URL+"/v1/watch"+query, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := w.srv.Client().Do(req)
	if err != nil {
		cancel()
		w.t.Fatal(err)
	}
	return resp, cancel
}

// watch opens a stream and waits for its first comment: the watcher has
// joined the feed, so every later change reaches it.
func (w *watchServer) watch(token, query, lastID string) *stream {
	w.t.Helper()
	resp, cancel := w.request(token, query, lastID)
	if resp.StatusCode != 200 {
		body, _ := io.ReadAll(resp.Body)
		cancel()
		w.t.Fatalf("GET /v1/watch%s: %d %s", query, resp.StatusCode, body)
	}
	s := &stream{t: w.t, resp: resp, cancel: cancel, events: make(chan sseEvent, 4096)}
	go s.read()
	w.t.Cleanup(s.close)
	if e, ok := s.nextAny(5 * time.Second); !ok || e.Comment != "watching" {
		w.t.Fatalf("first line %+v, want the watching comment", e)
	}
	return s
}

func (s *stream) read() {
	defer close(s.events)
	sc := bufio.NewScanner(s.resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var e sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if e != (sseEvent{}) {
				s.events <- e
			}
			e = sseEvent{}
		case strings.HasPrefix(line, ":"):
			e.Comment = strings.TrimSpace(line[1:])
		case strings.HasPrefix(line, "id: "):
			e.ID = line[4:]
		case strings.HasPrefix(line, "event: "):
			e.Type = line[7:]
		case strings.HasPrefix(line, "data: "):
			e.Data = line[6:]
		}
	}
}

func (s *stream) close() {
	s.cancel()
	s.resp.Body.Close()
}

// nextAny returns the next event or comment.
func (s *stream) nextAny(timeout time.Duration) (sseEvent, bool) {
	select {
	case e, ok := <-s.events:
		if ok && e.ID != "" {
			s.lastID = e.ID
		}
		return e, ok
	case <-time.After(timeout):
		return sseEvent{}, false
	}
}

// next returns the next event, skipping comments.
func (s *stream) next(timeout time.Duration) (sseEvent, bool) {
	deadline := time.Now().Add(timeout)
	for {
		e, ok := s.nextAny(time.Until(deadline))
		if !ok || e.Comment == "" {
			return e, ok
		}
	}
}

// until collects events up to and including the first that stop accepts.
func (s *stream) until(stop func(sseEvent) bool) []sseEvent {
	s.t.Helper()
	var out []sseEvent
	for {
		e, ok := s.next(5 * time.Second)
		if !ok {
			s.t.Fatalf("stream ended or stalled after %d events: %+v", len(out), out)
		}
		out = append(out, e)
		if stop(e) {
			return out
		}
	}
}

// quiet reports that nothing but comments arrives for d.
func (s *stream) quiet(d time.Duration) (sseEvent, bool) {
	e, ok := s.next(d)
	return e, !ok
}

// withWebhook serves POST /webhooks/gitea with secret.
func withWebhook(secret string) func(*api.Deps) {
	return func(d *api.Deps) {
		d.Webhook = &webhook.Handler{Verifier: &webhook.Verifier{Secrets: [][]byte{[]byte(secret)}}, Store: d.Store.Sessions.(*store.Store),
			Log: slog.New(slog.DiscardHandler)}
	}
}

// deliver posts a recorded, signed delivery.
func (w *watchServer) deliver(d delivery) {
	w.t.Helper()
	req := httptest.NewRequest("POST", "/webhooks/gitea", strings.NewReader(d.Body))
	for k, v := range d.Headers {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	w.handler.ServeHTTP(rec, req)
	if rec.Code != 200 {
		w.t.Fatalf("delivery: %d %s", rec.Code, rec.Body)
	}
}
