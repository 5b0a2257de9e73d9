package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// maxAnswerBytes bounds an answer read into memory; the largest the daemon
// sends (a checkpoint history page of 500, a reconcile report) is far less.
const maxAnswerBytes = 16 << 20

// drainHeader is the answer header that says a drain is gating (api.DrainHeader).
const drainHeader = "Checkpointd-Drain"

// request is one call of the API.
type request struct {
	method, path string
	query        url.Values
	body         []byte // encoded once: every try sends the same bytes
	hasBody      bool
	// idemKey is sent as Idempotency-Key: the daemon replays the first
	// answer to a repeat, so the request may be retried.
	idemKey string
	// noRetry marks a GET that must be tried once (a readiness probe).
	noRetry bool
}

// answer is what a call got back.
type answer struct {
	status   int
	header   http.Header
	body     []byte
	replayed bool // Idempotent-Replayed: true
}

// retryable is whether a request may be sent again after a failure whose
// outcome is unknown: reads, and writes the daemon deduplicates by key.
// A lease acquire, an end or a drain decision is never repeated behind the
// caller's back: a second try could act twice or answer for the first.
func (r *request) retryable() bool {
	if r.noRetry {
		return false
	}
	return r.method == http.MethodGet || r.method == http.MethodHead || r.idemKey != ""
}

func newRequest(method, path string, query url.Values, body any) (*request, error) {
	r := &request{method: method, path: path, query: query}
	if body != nil {
		b, err := encodeJSON(body)
		if err != nil {
			return nil, fmt.Errorf("checkpointd client: encode %s %s: %w", method, path, err)
		}
		r.body, r.hasBody = b, true
	}
	return r, nil
}

func encodeJSON(v any) ([]byte, error) {
	if raw, ok := v.(json.RawMessage); ok {
		return raw, nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// call sends r, retrying when that is safe, and decodes a 2xx answer into
// out (when not nil). A problem answer is an *Error; a failure to reach the
// daemon or read its answer is a *TransportError.
func (c *Client) call(ctx context.Context, r *request, out any) (*answer, error) {
	ans, err := c.send(ctx, r)
	if err != nil {
		return nil, err
	}
	if out != nil && len(ans.body) > 0 {
		if err := json.Unmarshal(ans.body, out); err != nil {
			return ans, &TransportError{Method: r.method, Path: r.path, Attempts: 1,
				Err: fmt.Errorf("the %d answer is not the JSON expected: %w", ans.status, err)}
		}
	}
	return ans, nil
}

func (c *Client) send(ctx context.Context, r *request) (*answer, error) {
	attempts := 1
	if r.retryable() {
		attempts = c.maxAttempts
	}
	var last error
	for try := 1; ; try++ {
		ans, err := c.once(ctx, r)
		if err == nil && ans.status >= 200 && ans.status < 300 {
			return ans, nil
		}
		var wait time.Duration
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("checkpointd client: %s %s: %w", r.method, r.path, context.Cause(ctx))
			}
			last = &TransportError{Method: r.method, Path: r.path, Attempts: try, Err: err}
		} else {
			p := newError(r, ans)
			last = p
			if !transient(p) {
				return nil, p
			}
			if ra, ok := retryAfter(ans.header); ok {
				if ra > MaxRetryAfter {
					return nil, p
				}
				wait = ra
			}
		}
		if try >= attempts {
			return nil, last
		}
		wait = max(wait, c.backoff(try))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("checkpointd client: %s %s: %w (after %d tries; last: %v)",
				r.method, r.path, context.Cause(ctx), try, last)
		case <-t.C:
		}
	}
}

// transient is whether a problem answer may go away by itself: a gateway
// or store outage (503 store_unavailable changed nothing), a request of
// the same key still in flight, or contention the daemon could not retry
// past (409 contended changed nothing). 503 draining is not: the drain
// lasts.
func transient(p *Error) bool {
	switch p.Status {
	case http.StatusBadGateway, http.StatusGatewayTimeout:
		return true
	case http.StatusServiceUnavailable:
		return p.Code != "draining"
	case http.StatusConflict:
		return p.Code == "idempotency_in_flight" || p.Code == "contended"
	}
	return false
}

// backoff is the wait after the try-th failure: doubling from RetryWait,
// capped at RetryMaxWait, with half of it random so that many clients
// failing together do not retry together.
func (c *Client) backoff(try int) time.Duration {
	d := c.wait << min(try-1, 16)
	if d <= 0 || d > c.maxWait {
		d = c.maxWait
	}
	return d/2 + rand.N(d/2+1)
}

// retryAfter reads a Retry-After header: delay-seconds or an HTTP date.
func retryAfter(h http.Header) (time.Duration, bool) {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
		return time.Duration(min(n, 1<<20)) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0), true
	}
	return 0, false
}

// newHTTPRequest builds one try of r. It is also what a streaming call
// (the watch feed) builds on: same URL, headers and token.
func (c *Client) newHTTPRequest(ctx context.Context, r *request) (*http.Request, error) {
	u := c.base + r.path
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	var body io.Reader
	if r.hasBody {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, body)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set("User-Agent", c.ua)
	req.Header.Set("Accept", "application/json, application/problem+json")
	if r.hasBody {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.idemKey != "" {
		req.Header.Set("Idempotency-Key", r.idemKey)
	}
	return req, nil
}

// once is one try: an answer of any status, or the error of the transport.
func (c *Client) once(ctx context.Context, r *request) (*answer, error) {
	req, err := c.newHTTPRequest(ctx, r)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	c.noteDrain(resp.Header)
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading the %d answer: %w", resp.StatusCode, err)
	}
	if len(body) > maxAnswerBytes {
		return nil, fmt.Errorf("the %d answer exceeds %d bytes", resp.StatusCode, maxAnswerBytes)
	}
	return &answer{status: resp.StatusCode, header: resp.Header, body: body,
		replayed: resp.Header.Get("Idempotent-Replayed") == "true"}, nil
}

// noteDrain records the drain header of an answer: every answer carries it
// while a drain gates, none otherwise.
func (c *Client) noteDrain(h http.Header) { c.draining.Store(h.Get(drainHeader) != "") }

// get reads path into out, retrying as reads may be.
func (c *Client) get(ctx context.Context, path string, q url.Values, out any) error {
	r, err := newRequest(http.MethodGet, path, q, nil)
	if err != nil {
		return err
	}
	_, err = c.call(ctx, r, out)
	return err
}

// post sends body to path once (it carries no idempotency key) and reads
// the answer into out.
func (c *Client) post(ctx context.Context, path string, body, out any) error {
	r, err := newRequest(http.MethodPost, path, nil, body)
	if err != nil {
		return err
	}
	_, err = c.call(ctx, r, out)
	return err
}

// Do sends any request of the API that has no method here and decodes a
// 2xx answer into out (nil: discard it; a *json.RawMessage keeps it as
// sent, e.g. to print it). Path is the API path with its leading slash
// ("/v1/…"); body, when not nil, is encoded as JSON (a json.RawMessage is
// sent as is). Only a GET is retried. Errors are *Error or *TransportError
// as for every method.
func (c *Client) Do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	r, err := newRequest(method, path, query, body)
	if err != nil {
		return err
	}
	_, err = c.call(ctx, r, out)
	return err
}
