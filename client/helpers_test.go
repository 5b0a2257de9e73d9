package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/api"
	"github.com/checkpointd/checkpointd/client"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// daemon is the real API handler over a real store, served over HTTP.
type daemon struct {
	store                   *store.Store
	srv                     *httptest.Server
	operator, agent, reader string // agent: acme/*; reader: acme/widgets
	outsider                string // agent scoped to other/*
	tokenCount              atomic.Int64
}

// serve starts the API over s.
func serve(s *store.Store) (*daemon, error) {
	d := &daemon{store: s}
	h := api.New(api.Deps{Store: api.StoresOf(s), Workflow: checkpointd.DefaultWorkflow(), DigestKey: []byte("client-test-digest-key"),
		DrainHeaderTTL: -1})
	d.srv = httptest.NewServer(recordRoutes(h))
	for _, tk := range []struct {
		into  *string
		role  checkpointd.TokenRole
		scope []string
	}{{&d.operator, checkpointd.RoleOperator, nil}, {&d.agent, checkpointd.RoleAgent, []string{"acme/*"}},
		{&d.reader, checkpointd.RoleReader, []string{"acme/widgets"}}, {&d.outsider, checkpointd.RoleAgent, []string{"other/*"}}} {
		secret := checkpointd.NewTokenSecret()
		name := fmt.Sprintf("%s-%d", tk.role, d.tokenCount.Add(1))
		if _, err := s.CreateToken(context.Background(), checkpointd.TokenSpec{Name: name, Role: tk.role, Scope: tk.scope}, checkpointd.HashToken(secret)); err != nil {
			d.srv.Close()
			return nil, err
		}
		*tk.into = secret
	}
	return d, nil
}

// newDaemon serves the API over a fresh store of backend b for t.
func newDaemon(t *testing.T, b storetest.Backend) *daemon {
	t.Helper()
	d, err := serve(storetest.Open(t, b, checkpointd.SystemClock{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.srv.Close)
	return d
}

// client returns a Client of the daemon for token, with fast retries.
func (d *daemon) client(t testing.TB, token string, mods ...func(*client.Config)) *client.Client {
	t.Helper()
	cfg := client.Config{Address: d.srv.URL, Token: token, RetryWait: 5 * time.Millisecond, RetryMaxWait: 20 * time.Millisecond}
	for _, m := range mods {
		m(&cfg)
	}
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// via routes a client's requests through rt.
func via(rt http.RoundTripper) func(*client.Config) {
	return func(c *client.Config) { c.HTTPClient = &http.Client{Transport: rt} }
}

// roundTrip is an http.RoundTripper of a function.
type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// counter counts the requests that match a method and path prefix, and
// lets fail decide, per matching request (1-based), to drop the answer
// after the daemon handled the request (a transport failure the client
// cannot tell from a lost request) or to answer in the daemon's stead.
type counter struct {
	method, prefix string
	n              atomic.Int64
	keys           sync.Map // Idempotency-Key values seen, by try
	// drop, when it returns true for the n-th matching request, discards
	// the daemon's answer and returns a transport error.
	drop func(n int64) bool
	// fake, when it returns an answer, is sent instead of the daemon's
	// (the request never reaches it).
	fake func(n int64) *http.Response
}

func (c *counter) transport() http.RoundTripper {
	base := http.DefaultTransport
	return roundTrip(func(r *http.Request) (*http.Response, error) {
		if r.Method != c.method || !strings.HasPrefix(r.URL.Path, c.prefix) {
			return base.RoundTrip(r)
		}
		n := c.n.Add(1)
		c.keys.Store(n, r.Header.Get("Idempotency-Key"))
		if c.fake != nil {
			if resp := c.fake(n); resp != nil {
				resp.Request = r
				return resp, nil
			}
		}
		resp, err := base.RoundTrip(r)
		if err == nil && c.drop != nil && c.drop(n) {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return nil, errors.New("connection reset after the request was sent")
		}
		return resp, err
	})
}

func (c *counter) key(n int64) string { v, _ := c.keys.Load(n); s, _ := v.(string); return s }

// problemAnswer is a synthetic problem answer.
func problemAnswer(status int, code string, header ...string) *http.Response {
	h := http.Header{"Content-Type": {"application/problem+json"}}
	for i := 0; i+1 < len(header); i += 2 {
		h.Set(header[i], header[i+1])
	}
	body := fmt.Sprintf(`{"type":"https://checkpointd.dev/problems/%s","title":%q,"status":%d,"code":%q}`,
		code, http.StatusText(status), status, code)
	return &http.Response{StatusCode: status, Status: fmt.Sprintf("%d %s", status, http.StatusText(status)),
		Header: h, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
}

// asProblem returns err as an *Error, failing t when it is not one.
func asProblem(t *testing.T, err error) *client.Error {
	t.Helper()
	var p *client.Error
	if !errors.As(err, &p) {
		t.Fatalf("error %v (%T) is not a *client.Error", err, err)
	}
	return p
}

// expectCode fails t unless err is a problem of status and code.
func expectCode(t *testing.T, err error, status int, code string) *client.Error {
	t.Helper()
	p := asProblem(t, err)
	if p.Status != status || p.Code != code {
		t.Fatalf("problem %d %s, want %d %s: %v", p.Status, p.Code, status, code, err)
	}
	return p
}

var testAgent = checkpointd.Agent{Runtime: "claude-code", Model: "test-model", Instance: "host-1"}

// newSession creates a session of acme/widgets for PR 7 as the agent.
func newSession(t *testing.T, c *client.Client) *client.SessionCreated {
	t.Helper()
	s, err := c.Sessions().Create(t.Context(), &client.CreateSessionRequest{Repo: "acme/widgets", Role: "author",
		PR: 7, Branch: "fix-7", Agent: testAgent}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// doc is a complete checkpoint document of run.
func doc(run *checkpointd.Run, stage string) *checkpointd.Document {
	return &checkpointd.Document{SchemaVersion: checkpointd.SchemaVersion, RunID: run.ID, FencingToken: run.FencingToken,
		Role: "author", Stage: stage, Identity: &checkpointd.Identity{Runtime: "claude-code"},
		Target:     &checkpointd.Target{Repo: "acme/widgets", PR: 7},
		Workspace:  &checkpointd.Workspace{Branch: "fix-7", Head: head1},
		NextAction: &checkpointd.NextAction{Actor: "author", Action: "run the tests"},
		Recovery:   &checkpointd.Recovery{Instructions: "git fetch && git checkout fix-7"}}
}

const head1 = "0123456789abcdef0123456789abcdef01234567"

// push records head as the live head of PR 7 and branch fix-7 of
// acme/widgets, as a verified webhook delivery does.
func (d *daemon) push(head string) error {
	_, err := d.store.Observe(context.Background(), []checkpointd.Observation{
		{Repo: "acme/widgets", Branch: "fix-7", Head: head, Authoritative: true, Source: "test"},
		{Repo: "acme/widgets", PR: 7, Head: head, Authoritative: true, Source: "test"}})
	return err
}
