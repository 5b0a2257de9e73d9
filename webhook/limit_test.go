package webhook

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// What these tests send: deliveries that claim to be pushes, signed with a
// well-formed but wrong signature, so nothing is known to be wrong about
// them until the whole body has been read and its HMAC computed.
const limitSecret = "s3cret"

var wrongSignature = strings.Repeat("0", 64)

// countingConn counts the bytes the server read from the client: what a
// sender made the daemon take in, whatever the handler then kept.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// CloseWrite keeps the server's lingering close (it half-closes, then waits
// for the client to read the answer) as it is on a bare TCP connection.
func (c countingConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{c, l.n}, nil
}

// limitServer serves h on loopback and counts the bytes it reads.
func limitServer(t *testing.T, h http.Handler) (addr string, read *atomic.Int64) {
	t.Helper()
	read = new(atomic.Int64)
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = countingListener{srv.Listener, read}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String(), read
}

func limitHandler(v *Verifier) *Handler {
	return &Handler{Verifier: v, Log: slog.New(slog.DiscardHandler)}
}

// rawDelivery opens a connection and writes a push delivery's request line
// and headers: a chunked body when length < 0, else that Content-Length.
// The body is the caller's to write.
func rawDelivery(t *testing.T, addr, id string, length int64) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	framing := "Transfer-Encoding: chunked"
	if length >= 0 {
		framing = "Content-Length: " + strconv.FormatInt(length, 10)
	}
	_, err = fmt.Fprintf(c, "POST /webhooks/gitea HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"+
		"X-Gitea-Delivery: %s\r\nX-Gitea-Event: push\r\nX-Gitea-Event-Type: push\r\nX-Gitea-Signature: %s\r\n%s\r\n\r\n",
		addr, id, wrongSignature, framing)
	if err != nil {
		t.Fatal(err)
	}
	return c, bufio.NewReader(c)
}

// chunkData is what the senders stream: one buffer, shared and never
// written, so the clients themselves allocate nothing per byte sent.
var chunkData = []byte(strings.Repeat(" ", 32<<10))

// stream writes chunks of spaces until total bytes are sent (then the last
// chunk) or a write fails, as when the server closed the connection.
func stream(c net.Conn, total int64) (sent int64) {
	head := []byte(fmt.Sprintf("%x\r\n", len(chunkData)))
	for sent < total {
		if _, err := c.Write(head); err != nil {
			return sent
		}
		n, err := c.Write(chunkData)
		sent += int64(n)
		if err != nil {
			return sent
		}
		if _, err := c.Write([]byte("\r\n")); err != nil {
			return sent
		}
	}
	_, _ = c.Write([]byte("0\r\n\r\n"))
	return sent
}

// answer reads the response and its problem code.
func answer(t *testing.T, br *bufio.Reader) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	var p struct{ Code string }
	_ = json.NewDecoder(resp.Body).Decode(&p)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp, p.Code
}

// readSlack is what the server may read past the cap: net/http, closing a
// request whose body the handler left, reads up to 256 KiB of it looking
// for its end, plus its buffers and the chunk framing.
const readSlack = 512 << 10

func TestDefaultMaxBodyFitsRealDeliveries(t *testing.T) {
	largest, name := 0, ""
	for _, dir := range []string{"gitea", "forgejo"} {
		files, err := filepath.Glob(filepath.Join("testdata", dir, "[0-9]*.json"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s fixtures: %v", dir, err)
		}
		for _, file := range files {
			f := loadFixture(t, filepath.Join(dir, filepath.Base(file)))
			if len(f.Body) > largest {
				largest, name = len(f.Body), file
			}
		}
	}
	t.Logf("largest real delivery: %d bytes (%s); cap %d bytes", largest, name, DefaultMaxBody)
	// Push payloads list at most 5 (Gitea) or 15 (Forgejo) commits; the
	// margin is for long PR descriptions and commit file lists.
	if largest*32 > DefaultMaxBody {
		t.Errorf("the cap %d leaves less than 32× the largest real delivery (%d bytes)", DefaultMaxBody, largest)
	}
	if DefaultMaxBody > 1<<20 {
		t.Errorf("the cap %d is over the documented 1 MiB", DefaultMaxBody)
	}
}

// TestChunkedOverCapRefusedEarly: a chunked body has no Content-Length to
// refuse it by; it is refused with 413 as soon as it passes the cap, and
// the server reads on no further than net/http's own bounded drain.
func TestChunkedOverCapRefusedEarly(t *testing.T) {
	addr, read := limitServer(t, limitHandler(&Verifier{Secrets: [][]byte{[]byte(limitSecret)}}))
	c, br := rawDelivery(t, addr, "chunked-over-cap", -1)
	sent := make(chan int64, 1)
	go func() { sent <- stream(c, 64<<20) }()
	resp, code := answer(t, br)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || code != "payload_too_large" {
		t.Fatalf("answer %d %s, want 413 payload_too_large", resp.StatusCode, code)
	}
	if !resp.Close {
		t.Error("the answer does not close the connection: the server would read the rest to reuse it")
	}
	// The server closes the connection: the sender's writes fail long
	// before its 64 MiB are out.
	if n := <-sent; n >= 64<<20 {
		t.Errorf("the sender wrote all %d bytes", n)
	}
	if n := read.Load(); n > DefaultMaxBody+readSlack {
		t.Errorf("the server read %d bytes of a body capped at %d", n, DefaultMaxBody)
	}
}

// TestContentLengthOverCapRefusedBeforeReading: a declared length over the
// cap is refused on the headers, with no byte of the body sent.
func TestContentLengthOverCapRefusedBeforeReading(t *testing.T) {
	const declared = 2 << 20 // twice the documented 1 MiB
	if DefaultMaxBody >= declared {
		t.Fatalf("the cap %d is not under %d", DefaultMaxBody, declared)
	}
	addr, read := limitServer(t, limitHandler(&Verifier{Secrets: [][]byte{[]byte(limitSecret)}}))
	c, br := rawDelivery(t, addr, "length-over-cap", declared)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, code := answer(t, br)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || code != "payload_too_large" {
		t.Fatalf("answer %d %s, want 413 payload_too_large", resp.StatusCode, code)
	}
	if !resp.Close {
		t.Error("the answer does not close the connection")
	}
	if n := read.Load(); n > 4<<10 {
		t.Errorf("the server read %d bytes: more than the headers", n)
	}
}

// slowDelivery starts a chunked delivery whose body stops after its first
// byte: the server holds it unverified until it ends or times out.
func slowDelivery(t *testing.T, addr, id string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, br := rawDelivery(t, addr, id, -1)
	if _, err := io.WriteString(c, "1\r\n{\r\n"); err != nil {
		t.Fatal(err)
	}
	return c, br
}

// held is how many slots are taken.
func (v *Verifier) held() int { return len(v.slotChan()) }

func waitSlots(t *testing.T, v *Verifier, want int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if v.held() == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d unverified bodies held, want %d", v.held(), want)
		}
	}
}

// TestUnverifiedBodiesBounded: with N bodies being read, the next delivery
// waits briefly for a slot, then is refused with 503 and Retry-After
// without its body being read; once a body is done, deliveries get in again.
func TestUnverifiedBodiesBounded(t *testing.T) {
	const n = 3
	v := &Verifier{Secrets: [][]byte{[]byte(limitSecret)}, MaxUnverified: n}
	addr, _ := limitServer(t, limitHandler(v))
	var held []net.Conn
	var heldBr []*bufio.Reader
	for i := range n {
		c, br := slowDelivery(t, addr, fmt.Sprintf("slow-%d", i))
		held, heldBr = append(held, c), append(heldBr, br)
	}
	waitSlots(t, v, n)

	_, br := slowDelivery(t, addr, "one-too-many")
	start := time.Now()
	resp, code := answer(t, br)
	took := time.Since(start)
	if resp.StatusCode != http.StatusServiceUnavailable || code != "webhook_busy" {
		t.Fatalf("answer %d %s, want 503 webhook_busy", resp.StatusCode, code)
	}
	if resp.Header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	if took > slotWait+2*time.Second {
		t.Errorf("the refusal took %v: the forge must not be kept waiting", took)
	}
	if v.held() != n {
		t.Fatalf("%d bodies held after the refusal, want %d", v.held(), n)
	}

	// The first slow delivery ends: it is judged (a wrong signature) and
	// its slot serves the next delivery.
	if _, err := io.WriteString(held[0], "0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if resp, code := answer(t, heldBr[0]); resp.StatusCode != http.StatusUnauthorized || code != "bad_signature" {
		t.Fatalf("finished slow delivery: %d %s, want 401 bad_signature", resp.StatusCode, code)
	}
	waitSlots(t, v, n-1)
	c, br := rawDelivery(t, addr, "after-a-slot-freed", 2)
	if _, err := io.WriteString(c, "{}"); err != nil {
		t.Fatal(err)
	}
	if resp, code := answer(t, br); resp.StatusCode != http.StatusUnauthorized || code != "bad_signature" {
		t.Fatalf("delivery after a slot freed: %d %s, want 401 bad_signature", resp.StatusCode, code)
	}
}

// TestSlowBodyTimesOut: a body that stops coming loses its slot when the
// handler's body timeout passes.
func TestSlowBodyTimesOut(t *testing.T) {
	v := &Verifier{Secrets: [][]byte{[]byte(limitSecret)}, MaxUnverified: 1}
	h := limitHandler(v)
	h.BodyTimeout = 200 * time.Millisecond
	addr, _ := limitServer(t, h)
	_, br := slowDelivery(t, addr, "stalled")
	start := time.Now()
	resp, code := answer(t, br)
	if resp.StatusCode != http.StatusRequestTimeout || code != "request_timeout" {
		t.Fatalf("answer %d %s, want 408 request_timeout", resp.StatusCode, code)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the stalled body held its slot for %v", took)
	}
	waitSlots(t, v, 0)
}

// memSample is the process's memory at one instant.
type memSample struct{ heapInuse, rss uint64 }

func sampleMem() memSample {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := memSample{heapInuse: ms.HeapInuse}
	// statm: size resident shared … in pages; absent off Linux.
	if b, err := os.ReadFile("/proc/self/statm"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 1 {
			pages, _ := strconv.ParseUint(f[1], 10, 64)
			s.rss = pages * uint64(os.Getpagesize())
		}
	}
	return s
}

// TestRejectedFloodKeepsMemoryBounded is the reproduction: 32
// concurrent chunked 25 MiB deliveries with a wrong signature (the issue
// measured RSS going from 35 MB to 1.8 GB). Only DefaultMaxUnverified
// bodies of at most DefaultMaxBody are held at once, in recycled buffers,
// so the heap grows by about those 16 MiB and RSS stays far under the
// issue's 300 MB bar. The
// senders stop once the heap has grown past the bound, so a regression
// fails fast instead of taking the machine's memory.
func TestRejectedFloodKeepsMemoryBounded(t *testing.T) {
	const senders, size = 32, 25 << 20
	// The daemon's collector target (serve): garbage left by refused
	// bodies would pile up to 5× the live heap before a collection.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	addr, read := limitServer(t, limitHandler(&Verifier{Secrets: [][]byte{[]byte(limitSecret)}}))
	// The bodies held (16 of at most 1 MiB), the server's own buffers and
	// room for the collector's lag, where the flood itself is 800 MiB.
	const bound = 64 << 20
	runtime.GC()
	base := sampleMem()

	var conns []net.Conn
	var brs []*bufio.Reader
	for i := range senders {
		c, br := rawDelivery(t, addr, fmt.Sprintf("flood-%d", i), -1)
		conns, brs = append(conns, c), append(brs, br)
	}
	stop := make(chan struct{})
	var peak memSample
	var sampling sync.WaitGroup
	sampling.Go(func() {
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		over := false
		for {
			s := sampleMem()
			peak.heapInuse, peak.rss = max(peak.heapInuse, s.heapInuse), max(peak.rss, s.rss)
			if !over && s.heapInuse > base.heapInuse+bound {
				over = true // cut the flood: the assertion below fails
				for _, c := range conns {
					c.Close()
				}
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	})
	var wg sync.WaitGroup
	codes := make([]string, senders)
	for i := range senders {
		wg.Go(func() { stream(conns[i], size) })
		wg.Go(func() {
			resp, err := http.ReadResponse(brs[i], nil)
			if err != nil {
				codes[i] = "no answer: " + err.Error()
				return
			}
			resp.Body.Close()
			codes[i] = resp.Status
			conns[i].Close() // the sender stops
		})
	}
	start := time.Now()
	wg.Wait()
	close(stop)
	sampling.Wait()
	t.Logf("%d senders in %v: server read %d MiB; heap in use %d → peak %d MiB; RSS %d → peak %d MB",
		senders, time.Since(start).Round(time.Millisecond), read.Load()>>20,
		base.heapInuse>>20, peak.heapInuse>>20, base.rss/1e6, peak.rss/1e6)
	if grew := peak.heapInuse - base.heapInuse; grew > bound {
		t.Errorf("the heap grew by %d MiB under the flood, over the bound of %d MiB", grew>>20, bound>>20)
	}
	// The issue saw RSS start at 35 MB; what it may add is the rest of 300.
	if grew := peak.rss - min(peak.rss, base.rss); grew > 265e6 {
		t.Errorf("RSS grew by %d MB under the flood: past the issue's 300 MB bar", grew/1e6)
	}
	for i, code := range codes {
		if code != "413 Request Entity Too Large" && code != "503 Service Unavailable" {
			t.Errorf("sender %d: %s, want 413 (over the cap) or 503 (no slot)", i, code)
		}
	}
}
