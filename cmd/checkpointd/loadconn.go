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
// way, a request object per call); this costs about half of that, and the
// daemon parses exactly the request it did.
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
	c.head = fmt.Appendf(nil, "POST %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: checkpointd-loadtest/%s\r\n"+
		"Authorization: Bearer %s\r\nAccept: application/json, application/problem+json\r\nContent-Type: application/json\r\n",
		target, u.Host, version(), token)
	return c, nil
}

// post sends one write and reads its whole answer. failure is "" for a 201,
// else the status and problem code ("409 run_superseded"); err is a
// transport failure (no answer, or an answer that could not be read), after
// which the connection is closed and the next write dials again. When ctx
// ends (the operator's Ctrl-C), a write waiting on the daemon ends at once.
func (c *loadConn) post(ctx context.Context, body []byte, idempotencyKey string) (failure string, err error) {
	if c.conn == nil {
		if err := c.dial(ctx); err != nil {
			return "", err
		}
	}
	b := append(c.buf[:0], c.head...)
	if idempotencyKey != "" {
		b = append(append(append(b, "Idempotency-Key: "...), idempotencyKey...), "\r\n"...)
	}
	b = append(strconv.AppendInt(append(b, "Content-Length: "...), int64(len(body)), 10), "\r\n\r\n"...)
	c.buf = append(b, body...)
	if err := c.conn.SetDeadline(time.Now().Add(loadRequestTimeout)); err != nil {
		return "", c.fail(err)
	}
	if _, err := c.conn.Write(c.buf); err != nil {
		return "", c.fail(err)
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return "", c.fail(fmt.Errorf("reading the answer: %w", err))
	}
	answer, err := io.ReadAll(io.LimitReader(resp.Body, loadMaxAnswerBytes+1))
	_ = resp.Body.Close()
	switch {
	case err != nil:
		return "", c.fail(fmt.Errorf("reading the %d answer: %w", resp.StatusCode, err))
	case len(answer) > loadMaxAnswerBytes:
		return "", c.fail(fmt.Errorf("the %d answer exceeds %d bytes", resp.StatusCode, loadMaxAnswerBytes))
	}
	if resp.Close {
		c.close()
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

// loadMaxAnswerBytes bounds an answer read: a checkpoint as written, at
// most --doc-bytes, and the server's fields.
const loadMaxAnswerBytes = 1 << 20

func (c *loadConn) dial(ctx context.Context) error {
	d := &net.Dialer{Timeout: loadRequestTimeout, KeepAlive: 30 * time.Second}
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
