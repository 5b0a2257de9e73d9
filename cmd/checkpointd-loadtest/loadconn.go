package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// loadConn is one writer's keep-alive connection to the daemon: each
// checkpoint write is sent as the bytes of an HTTP/1.1 request, and its
// answer is read with http.ReadResponse.
//
// The load generator shares the machine it measures, so what it spends is
// taken from the daemon. net/http's client cost ~120 µs of CPU per write
// here (a reader and a writer goroutine per connection, a handoff each
// way, a request object per call); this costs about half of that, and over
// http:// the daemon parses the same request.
type loadConn struct {
	addr string      // host:port to dial
	tls  *tls.Config // nil for http://
	head []byte      // request line and fixed headers
	conn net.Conn
	br   *bufio.Reader
	stop func() bool // unregisters the close on the dial context's end
	buf  []byte
}

// newLoadConn prepares the connection for writes to session id through the
// daemon at base (http(s)://host[:port][/prefix], as validated). It dials on
// the first write.
func newLoadConn(base, token, sessionID string) (*loadConn, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("loadtest: --url: %w", err)
	}
	// Both go into header lines as they are (the session id in the
	// Idempotency-Key): a control character would end a line early.
	if !headerSafe(token) || !headerSafe(sessionID) {
		return nil, fmt.Errorf("loadtest: the token or session id %q holds a control character", sessionID)
	}
	c := &loadConn{addr: u.Host}
	port := "80"
	if u.Scheme == "https" {
		port = "443"
		c.tls = &tls.Config{ServerName: u.Hostname(), MinVersion: tls.VersionTLS12}
	}
	if u.Port() == "" {
		c.addr = net.JoinHostPort(u.Hostname(), port)
	}
	target := u.EscapedPath() + "/v1/sessions/" + url.PathEscape(sessionID) + "/checkpoints"
	c.head = fmt.Appendf(nil, "POST %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: %s\r\n"+
		"Authorization: Bearer %s\r\nAccept: application/json, application/problem+json\r\nContent-Type: application/json\r\n",
		target, u.Host, loadUserAgent(), token)
	return c, nil
}

// loadUserAgent names the load generator in every request it sends.
func loadUserAgent() string { return "checkpointd-loadtest/" + version() }

// headerSafe is whether s may stand in a header line: no control
// character, CR and LF included.
func headerSafe(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return false
		}
	}
	return true
}

// post sends one write and reads its whole answer, within loadRequestTimeout
// from its start, a dial included. failure is "" for a 201, else the status
// and problem code ("409 run_superseded"); err is a transport failure (no
// answer, or an answer that could not be read), after which the connection
// is closed and the next write dials again. Nothing is retried. When the
// context the connection was dialled with ends (every write of a writer
// passes the same one: the operator's Ctrl-C), a write waiting on the daemon
// ends at once.
func (c *loadConn) post(ctx context.Context, body []byte, idempotencyKey string) (failure string, err error) {
	deadline := time.Now().Add(loadRequestTimeout)
	if c.conn == nil {
		if err := c.dial(ctx, deadline); err != nil {
			return "", err
		}
	}
	b := append(c.buf[:0], c.head...)
	if idempotencyKey != "" {
		b = append(append(append(b, "Idempotency-Key: "...), idempotencyKey...), "\r\n"...)
	}
	b = append(strconv.AppendInt(append(b, "Content-Length: "...), int64(len(body)), 10), "\r\n\r\n"...)
	c.buf = append(b, body...)
	if err := c.conn.SetDeadline(deadline); err != nil {
		return "", c.fail(err)
	}
	if _, err := c.conn.Write(c.buf); err != nil {
		return "", c.fail(err)
	}
	resp, err := c.readFinal()
	if err != nil {
		return "", c.fail(err)
	}
	answer, err := io.ReadAll(io.LimitReader(resp.Body, loadMaxAnswerBytes+1))
	_ = resp.Body.Close()
	switch {
	case err != nil:
		return "", c.fail(fmt.Errorf("reading the %d answer: %w", resp.StatusCode, err))
	case len(answer) > loadMaxAnswerBytes:
		return "", c.fail(fmt.Errorf("the %d answer exceeds %d bytes", resp.StatusCode, loadMaxAnswerBytes))
	}
	if resp.Close || resp.StatusCode == http.StatusSwitchingProtocols {
		c.close() // no further answer comes on it
	}
	if resp.StatusCode == http.StatusCreated {
		return "", nil
	}
	var p struct {
		Code string `json:"code"`
	}
	if json.Unmarshal(answer, &p) == nil && p.Code != "" {
		return strconv.Itoa(resp.StatusCode) + " " + p.Code, nil
	}
	return strconv.Itoa(resp.StatusCode), nil
}

// loadMaxInformational bounds the 1xx answers (a proxy's 103 Early Hints)
// read before the final one, as net/http's client does.
const loadMaxInformational = 5

// readFinal reads the answer to the request just sent, past any 1xx
// answer before it: taken for the final one, it would leave every later
// write reading its predecessor's answer.
func (c *loadConn) readFinal() (*http.Response, error) {
	for range loadMaxInformational + 1 {
		resp, err := http.ReadResponse(c.br, nil)
		if err != nil {
			return nil, fmt.Errorf("reading the answer: %w", err)
		}
		if resp.StatusCode < 100 || resp.StatusCode > 199 || resp.StatusCode == http.StatusSwitchingProtocols {
			return resp, nil
		}
	}
	return nil, fmt.Errorf("more than %d informational (1xx) answers", loadMaxInformational)
}

// loadMaxAnswerBytes bounds an answer read: a checkpoint as written, at
// most --doc-bytes, and the server's fields.
const loadMaxAnswerBytes = 1 << 20

func (c *loadConn) dial(ctx context.Context, deadline time.Time) error {
	d := &net.Dialer{Deadline: deadline, KeepAlive: 30 * time.Second}
	var conn net.Conn
	var err error
	if c.tls != nil {
		conn, err = (&tls.Dialer{NetDialer: d, Config: c.tls}).DialContext(ctx, "tcp", c.addr)
	} else {
		conn, err = d.DialContext(ctx, "tcp", c.addr)
	}
	if err != nil {
		return err
	}
	c.conn, c.br = conn, bufio.NewReaderSize(conn, 8<<10)
	c.stop = context.AfterFunc(ctx, func() { _ = conn.Close() })
	return nil
}

func (c *loadConn) fail(err error) error {
	c.close()
	return err
}

// close drops the connection; the next write dials a new one.
func (c *loadConn) close() {
	if c.conn == nil {
		return
	}
	c.stop()
	_ = c.conn.Close()
	c.conn, c.br = nil, nil
}
