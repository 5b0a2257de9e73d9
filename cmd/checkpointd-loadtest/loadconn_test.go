package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// seenRequest is what net/http's server parsed of one request.
type seenRequest struct {
	method, uri, host    string
	auth, ctype, key, ua string
	contentLength        int64
	body                 string
}

// recordingServer answers every request with answer(n) (n counts from 1)
// and records what it parsed; it counts the connections it accepted.
func recordingServer(t *testing.T, tlsOn bool, answer func(n int, w http.ResponseWriter)) (*httptest.Server, func() []seenRequest, *atomic.Int64) {
	t.Helper()
	var mu sync.Mutex
	var seen []seenRequest
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, seenRequest{method: r.Method, uri: r.RequestURI, host: r.Host,
			auth: r.Header.Get("Authorization"), ctype: r.Header.Get("Content-Type"), key: r.Header.Get("Idempotency-Key"),
			ua: r.Header.Get("User-Agent"), contentLength: r.ContentLength, body: string(body)})
		n := len(seen)
		mu.Unlock()
		answer(n, w)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	if tlsOn {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv, func() []seenRequest { mu.Lock(); defer mu.Unlock(); return append([]seenRequest(nil), seen...) }, &conns
}

func created(_ int, w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, `{"checkpoint":{"seq":1}}`)
}

// superseded answers as the daemon does a write of a superseded run.
func superseded(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(http.StatusConflict)
	_, _ = io.WriteString(w, `{"type":"about:blank","status":409,"code":"run_superseded"}`)
}

// testConn is a loadConn to url for session ses_x, closed with the test.
func testConn(t *testing.T, url string) *loadConn {
	t.Helper()
	c, err := newLoadConn(url, "t", "ses_x")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.close)
	return c
}

// The request the daemon gets is the one the Go client sent: method, path
// under the URL's prefix, token, content type, length, key and body; every
// write goes on one keep-alive connection.
func TestLoadConnSendsTheWrite(t *testing.T) {
	srv, seen, conns := recordingServer(t, false, created)
	c, err := newLoadConn(srv.URL+"/prefix", "tok-123", "ses_01JQ8ZK4T6W2B9N3C5D7F1G0HX")
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	for i, key := range []string{"", "ses_1-2", ""} {
		body := strings.Repeat("x", 10+i)
		if failure, err := c.post(t.Context(), []byte(body), key); err != nil || failure != "" {
			t.Fatalf("write %d: failure %q, err %v", i, failure, err)
		}
	}
	got := seen()
	if len(got) != 3 {
		t.Fatalf("%d requests reached the server, want 3", len(got))
	}
	for i, r := range got {
		want := seenRequest{method: "POST", uri: "/prefix/v1/sessions/ses_01JQ8ZK4T6W2B9N3C5D7F1G0HX/checkpoints",
			host: strings.TrimPrefix(srv.URL, "http://"), auth: "Bearer tok-123", ctype: "application/json",
			ua: "checkpointd-loadtest/" + version(), contentLength: int64(10 + i), body: strings.Repeat("x", 10+i)}
		if i == 1 {
			want.key = "ses_1-2"
		}
		if r != want {
			t.Errorf("request %d:\n got %+v\nwant %+v", i, r, want)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for 3 writes, want 1 kept alive", n)
	}
}

// A failed write is named by status and problem code, and an answer that
// closes the connection makes the next write dial again.
func TestLoadConnFailuresAndClose(t *testing.T) {
	srv, _, conns := recordingServer(t, false, func(n int, w http.ResponseWriter) {
		switch n {
		case 1:
			superseded(w)
		case 2:
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, "<html>bad gateway</html>")
		default:
			created(n, w)
		}
	})
	c := testConn(t, srv.URL)
	for i, want := range []string{"409 run_superseded", "502", "", ""} {
		failure, err := c.post(t.Context(), []byte("{}"), "")
		if err != nil || failure != want {
			t.Errorf("write %d: failure %q, err %v; want %q", i+1, failure, err, want)
		}
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2: one until the server closed it, then one more", n)
	}
}

// A 1xx answer before the final one (a proxy's Early Hints) is skipped:
// taken for the answer, it would put every later write one answer behind.
func TestLoadConnSkipsInformationalAnswers(t *testing.T) {
	srv, _, _ := recordingServer(t, false, func(n int, w http.ResponseWriter) {
		switch n {
		case 1:
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusEarlyHints)
			created(n, w)
		case 2:
			superseded(w)
		default:
			created(n, w)
		}
	})
	c := testConn(t, srv.URL)
	for i, want := range []string{"", "409 run_superseded", ""} {
		if f, err := c.post(t.Context(), []byte("{}"), ""); f != want || err != nil {
			t.Errorf("write %d: failure %q, err %v; want %q", i+1, f, err, want)
		}
	}
}

// The token and the session id go into header lines as they are, so a
// control character in either is refused before anything is sent.
func TestLoadConnRefusesControlCharacters(t *testing.T) {
	for _, tc := range []struct{ token, session string }{
		{"tok\r\nX-Injected: 1", "ses_x"},
		{"tok", "ses_x\nX-Injected: 1"},
		{"tok\x7f", "ses_x"},
	} {
		if _, err := newLoadConn("http://127.0.0.1:1", tc.token, tc.session); err == nil {
			t.Errorf("token %q, session %q: accepted", tc.token, tc.session)
		}
	}
	if _, err := newLoadConn("http://127.0.0.1:1", "tok-ok_1.2~", "ses_01JQ8ZK4T6W2B9N3C5D7F1G0HX"); err != nil {
		t.Errorf("a plain token and id: %v", err)
	}
}

// A writer sends its own Idempotency-Key with each write when asked, and
// none otherwise.
func TestLoadtestWriterIdempotencyKeys(t *testing.T) {
	for _, keys := range []bool{true, false} {
		srv, seen, _ := recordingServer(t, false, created)
		lc := &loadClient{cfg: loadConfig{URL: srv.URL, Token: "t", Repo: "loadtest/loadtest", Clients: 1,
			DocBytes: 3000, MaxRequests: 3, IdempotencyKeys: keys}}
		s := loadSession{ID: "ses_k", RunID: "run_k", Token: 1}
		var budget atomic.Int64
		st := lc.write(t.Context(), s, time.Now().Add(time.Minute), &budget)
		if st.ok != 3 {
			t.Fatalf("keys %v: %d writes succeeded, want 3 (%v)", keys, st.ok, st.errors)
		}
		for i, r := range seen() {
			want := ""
			if keys {
				want = "ses_k-" + strconv.Itoa(i+1)
			}
			if r.key != want {
				t.Errorf("keys %v, write %d: Idempotency-Key %q, want %q", keys, i+1, r.key, want)
			}
		}
	}
}

// A connection cut before the answer is a transport failure, and the
// next write goes on a new connection.
func TestLoadConnCutConnection(t *testing.T) {
	srv, _, conns := recordingServer(t, false, func(n int, w http.ResponseWriter) {
		if n == 2 {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close()
			}
			return
		}
		created(n, w)
	})
	c := testConn(t, srv.URL)
	if f, err := c.post(t.Context(), []byte("{}"), ""); f != "" || err != nil {
		t.Fatalf("write 1: %q %v", f, err)
	}
	if f, err := c.post(t.Context(), []byte("{}"), ""); err == nil {
		t.Fatalf("write 2 on a cut connection: failure %q and no error, want a transport error", f)
	}
	if f, err := c.post(t.Context(), []byte("{}"), ""); f != "" || err != nil {
		t.Fatalf("write 3 after the cut: %q %v, want it to dial again and succeed", f, err)
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
}

// https:// is dialled with TLS and the server's name verified.
func TestLoadConnTLS(t *testing.T) {
	srv, seen, _ := recordingServer(t, true, created)
	c := testConn(t, srv.URL)
	// Unknown to the system's roots: refused.
	if _, err := c.post(t.Context(), []byte("{}"), ""); err == nil {
		t.Fatal("a certificate no root signs was accepted")
	}
	c.tls.RootCAs = srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	if f, err := c.post(t.Context(), []byte("{}"), ""); f != "" || err != nil {
		t.Fatalf("write over TLS: %q %v", f, err)
	}
	if len(seen()) != 1 {
		t.Errorf("%d requests reached the server, want 1 (the refused handshake sends none)", len(seen()))
	}
	if c.tls.ServerName != "127.0.0.1" || c.tls.MinVersion != tls.VersionTLS12 {
		t.Errorf("tls config %q %x", c.tls.ServerName, c.tls.MinVersion)
	}
}

// An operator's interrupt ends a write the daemon never answers.
func TestLoadConnInterrupted(t *testing.T) {
	release := make(chan struct{})
	srv, _, _ := recordingServer(t, false, func(int, http.ResponseWriter) { <-release })
	defer close(release)
	ctx, cancel := context.WithCancel(t.Context())
	c := testConn(t, srv.URL)
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	if _, err := c.post(ctx, []byte("{}"), ""); err == nil {
		t.Fatal("an interrupted write reported no error")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the interrupted write returned after %s", took)
	}
}

// BenchmarkLoadWrite is load-test writes on loadConn against the same
// writes through net/http's client (what loadtest used before), 16 writers
// as loadtest's default, to the same in-process server answering like the
// daemon (201, a ~3.5 KB body). The server's cost is in both; the
// difference is the clients'. It shows in the CPU, reported as cpu-µs/op
// (this process's user and system time per write), more than in the wall
// time.
func BenchmarkLoadWrite(b *testing.B) {
	answer := `{"checkpoint":` + strings.Repeat(`"x"`, 1200) + `}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, answer)
	}))
	defer srv.Close()
	var sessions atomic.Int64
	// session is a writer's own session and document, as loadtest's.
	session := func() (loadSession, loadDocument) {
		id := fmt.Sprintf("ses_%026d", sessions.Add(1))
		s := loadSession{ID: id, RunID: "run_" + id[4:], Token: 1}
		return s, newLoadDocument("loadtest/loadtest", s, 3000)
	}
	writers := func(b *testing.B, write func(pb *testing.PB)) {
		b.SetParallelism(max(16/runtime.GOMAXPROCS(0), 1))
		b.ReportAllocs()
		cpu0 := processCPU()
		b.RunParallel(write)
		user, sys := processCPU().sub(cpu0)
		b.ReportMetric(float64((user+sys).Microseconds())/float64(b.N), "cpu-µs/op")
	}

	b.Run("loadConn", func(b *testing.B) {
		writers(b, func(pb *testing.PB) {
			s, doc := session()
			c, err := newLoadConn(srv.URL, "tok", s.ID)
			if err != nil {
				b.Error(err)
				return
			}
			defer c.close()
			for n := int64(1); pb.Next(); n++ {
				if f, err := c.post(context.Background(), doc.stamp(n), ""); f != "" || err != nil {
					b.Error(f, err)
					return
				}
			}
		})
	})
	b.Run("net-http", func(b *testing.B) {
		hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
		defer hc.CloseIdleConnections()
		writers(b, func(pb *testing.PB) {
			s, doc := session()
			u := srv.URL + "/v1/sessions/" + s.ID + "/checkpoints"
			for n := int64(1); pb.Next(); n++ {
				req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, u, bytes.NewReader(bytes.Clone(doc.stamp(n))))
				if err != nil {
					b.Error(err)
					return
				}
				req.Header.Set("Authorization", "Bearer tok")
				req.Header.Set("Content-Type", "application/json")
				resp, err := hc.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				_, err = io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusCreated {
					b.Error(resp.StatusCode, err)
					return
				}
			}
		})
	})
}
