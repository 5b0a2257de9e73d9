package client

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
)

// Config says which daemon a Client talks to, and how.
type Config struct {
	// Address is the daemon's base URL, http(s)://host:port, optionally
	// with a path prefix when a proxy serves the API under one.
	Address string
	// Token is the bearer token sent with every request. Empty sends none:
	// only the schema, /healthz and /readyz answer without one.
	Token string
	// HTTPClient defaults to a client with connect, TLS and
	// response-header timeouts but no overall timeout, so a long-lived
	// stream (the watch feed) is not cut: bound each call with its ctx.
	// Its CheckRedirect is not used: the Client never follows a redirect
	// (one would resend the body and the bearer token elsewhere, or turn
	// a POST into a GET that "succeeds"); a 3xx answer is an *Error.
	HTTPClient *http.Client
	// UserAgent defaults to DefaultUserAgent.
	UserAgent string
	// MaxAttempts bounds the tries of a request that is safe to retry
	// (default 4; 1 disables retries). Others are tried once, always.
	MaxAttempts int
	// RetryWait is the first wait between tries (default 200ms); it doubles
	// up to RetryMaxWait (default 3s), with jitter.
	RetryWait, RetryMaxWait time.Duration
}

// DefaultUserAgent is the User-Agent of a Client without one configured.
const DefaultUserAgent = "checkpointd-go-client/1"

// Defaults of Config.
const (
	DefaultMaxAttempts  = 4
	DefaultRetryWait    = 200 * time.Millisecond
	DefaultRetryMaxWait = 3 * time.Second
	// MaxRetryAfter is the longest Retry-After a Client waits out by
	// itself; an answer asking for longer is returned to the caller,
	// whose ctx and judgement are better placed to wait that long.
	MaxRetryAfter = 10 * time.Second
)

// Client talks to one checkpointd daemon over its HTTP API v1.
// It is safe for concurrent use. Its methods are grouped by resource:
// c.Sessions(), c.Checkpoints(), c.Leases(), c.Drain(), c.Reconcile(),
// c.ErrorLog(); the schema and health probes hang off the Client itself.
type Client struct {
	base        string // without a trailing slash
	token       string
	ua          string
	http        *http.Client
	maxAttempts int
	wait        time.Duration
	maxWait     time.Duration
	// draining is the Checkpointd-Drain header of the last answer.
	draining atomic.Bool
}

// New returns a Client for cfg. It fails only on a malformed Address; no
// request is sent until a method is called.
func New(cfg Config) (*Client, error) {
	base := strings.TrimRight(cfg.Address, "/")
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("checkpointd client: address %q: want http(s)://host:port", cfg.Address)
	}
	if strings.ContainsAny(cfg.Token, "\r\n") {
		return nil, errors.New("checkpointd client: the token holds a line break")
	}
	c := &Client{base: base, token: cfg.Token, ua: cfg.UserAgent, http: cfg.HTTPClient,
		maxAttempts: cfg.MaxAttempts, wait: cfg.RetryWait, maxWait: cfg.RetryMaxWait}
	if c.ua == "" {
		c.ua = DefaultUserAgent
	}
	if c.http == nil {
		c.http = defaultHTTPClient()
	} else {
		hc := *c.http // the caller's client stays as it was
		c.http = &hc
	}
	c.http.CheckRedirect = refuseRedirect
	if c.maxAttempts <= 0 {
		c.maxAttempts = DefaultMaxAttempts
	}
	if c.wait <= 0 {
		c.wait = DefaultRetryWait
	}
	if c.maxWait <= 0 {
		c.maxWait = DefaultRetryMaxWait
	}
	c.maxWait = max(c.maxWait, c.wait)
	return c, nil
}

func defaultHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = 10 * time.Second
	// The daemon answers every request but the watch feed promptly; a
	// stream's headers come at once too.
	t.ResponseHeaderTimeout = time.Minute
	return &http.Client{Transport: t}
}

// refuseRedirect makes net/http return a redirect as the answer it is.
func refuseRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// Address is the daemon's base URL as configured, without a trailing slash.
func (c *Client) Address() string { return c.base }

// Draining reports whether the last answer from the daemon carried the
// Checkpointd-Drain header: a drain started, new sessions and runs are
// refused, and an agent should write a complete checkpoint and wind down
// (docs/drain.md). It is false before the first answer.
func (c *Client) Draining() bool { return c.draining.Load() }

// Sessions is the session resource.
func (c *Client) Sessions() *Sessions { return &Sessions{c: c} }

// Checkpoints is the checkpoint resource.
func (c *Client) Checkpoints() *Checkpoints { return &Checkpoints{c: c} }

// Leases is the lease resource.
func (c *Client) Leases() *Leases { return &Leases{c: c} }

// Drain is the drain gate.
func (c *Client) Drain() *Drain { return &Drain{c: c} }

// Reconcile is the reconcile pass.
func (c *Client) Reconcile() *Reconcile { return &Reconcile{c: c} }

// ErrorLog is the durable log of failed checkpoint writes, webhook
// rejections and reconcile failures (GET /v1/errors).
func (c *Client) ErrorLog() *ErrorLog { return &ErrorLog{c: c} }
