package client_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/client"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestRetriedWriteIsReplayed loses the answer to a checkpoint write and
// to a session create after the daemon handled them: the retry carries
// the same key, is answered with the first write's result, and nothing is
// written twice.
func TestRetriedWriteIsReplayed(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		d := newDaemon(t, b)
		ctx := t.Context()
		creates := &counter{method: http.MethodPost, prefix: "/v1/sessions", drop: func(n int64) bool { return n == 1 }}
		agent := d.client(t, d.agent, via(creates.transport()))
		s := newSession(t, agent)
		if creates.n.Load() != 2 || !s.Replayed || creates.key(1) == "" || creates.key(1) != creates.key(2) {
			t.Fatalf("create: %d tries, replayed %v, keys %q %q", creates.n.Load(), s.Replayed, creates.key(1), creates.key(2))
		}
		page, err := agent.Sessions().List(ctx, client.SessionListOptions{})
		if err != nil || len(page.Items) != 1 || page.Items[0].ID != s.Session.ID {
			t.Fatalf("sessions after a retried create: %v %+v", err, page)
		}

		writes := &counter{method: http.MethodPost, prefix: "/v1/sessions/" + s.Session.ID + "/checkpoints",
			drop: func(n int64) bool { return n == 1 }}
		w, err := d.client(t, d.agent, via(writes.transport())).Checkpoints().Write(ctx, s.Session.ID, doc(s.Run, "implementing"), nil)
		if err != nil {
			t.Fatal(err)
		}
		if writes.n.Load() != 2 || writes.key(1) != writes.key(2) || writes.key(1) != w.IdempotencyKey {
			t.Errorf("%d tries with keys %q %q, answer's key %q", writes.n.Load(), writes.key(1), writes.key(2), w.IdempotencyKey)
		}
		if !w.Replayed || w.Checkpoint.Seq != 1 {
			t.Errorf("retry answered replayed=%v seq %d, want a replay of seq 1", w.Replayed, w.Checkpoint.Seq)
		}
		hist, err := agent.Checkpoints().List(ctx, s.Session.ID, client.ListOptions{})
		if err != nil || len(hist.Items) != 1 || hist.Items[0].Seq != 1 {
			t.Fatalf("history after a retried write: %v %+v", err, hist)
		}

		// A key of the caller's survives the caller: the same write sent
		// again by a restarted process is a replay too.
		opts := &client.WriteOptions{IdempotencyKey: "stage-testing"}
		w1, err := agent.Checkpoints().Write(ctx, s.Session.ID, doc(s.Run, "testing"), opts)
		if err != nil {
			t.Fatal(err)
		}
		w2, err := agent.Checkpoints().Write(ctx, s.Session.ID, doc(s.Run, "testing"), opts)
		if err != nil || !w2.Replayed || w2.Checkpoint.Seq != w1.Checkpoint.Seq {
			t.Fatalf("rewrite with the same key: %v %+v", err, w2)
		}
		_, err = agent.Checkpoints().Write(ctx, s.Session.ID, doc(s.Run, "reviewing"), opts)
		expectCode(t, err, http.StatusUnprocessableEntity, "idempotency_conflict")
	})
}

// TestNoRetryWithoutKey: a lost answer to a call the daemon does not
// deduplicate is returned, never retried: the lease was acquired, and a
// second acquire would not say so.
func TestNoRetryWithoutKey(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		d := newDaemon(t, b)
		ctx := t.Context()
		agent := d.client(t, d.agent)
		s := newSession(t, agent)
		pr7 := checkpointd.Resource{Kind: checkpointd.ResourcePR, Repo: "acme/widgets", Number: 7}

		leases := &counter{method: http.MethodPost, prefix: "/v1/leases", drop: func(int64) bool { return true }}
		_, err := d.client(t, d.agent, via(leases.transport())).Leases().Acquire(ctx,
			&client.AcquireRequest{Resource: pr7, SessionID: s.Session.ID, RunID: s.Run.ID, TTLSeconds: 60})
		var te *client.TransportError
		if !errors.As(err, &te) || te.Attempts != 1 {
			t.Fatalf("acquire with a lost answer: %v, want a TransportError of 1 try", err)
		}
		var p *client.Error
		if errors.As(err, &p) {
			t.Errorf("a transport error is also a problem: %v", p)
		}
		if n := leases.n.Load(); n != 1 {
			t.Errorf("acquire sent %d times, want 1", n)
		}
		held, err := agent.Leases().List(ctx, client.LeaseListOptions{SessionID: s.Session.ID})
		if err != nil || len(held.Items) != 1 {
			t.Fatalf("the lost acquire did acquire: %v %+v", err, held)
		}

		// 503 is transient, yet a write without a key is sent once.
		for _, tc := range []struct {
			name, method, prefix string
			call                 func(*client.Client) error
		}{
			{"end", http.MethodPost, "/v1/sessions/" + s.Session.ID + "/end", func(c *client.Client) error {
				_, err := c.Sessions().End(ctx, s.Session.ID, &client.EndRequest{RunID: s.Run.ID, Outcome: checkpointd.OutcomeCompleted})
				return err
			}},
			{"takeover", http.MethodPost, "/v1/sessions/" + s.Session.ID + "/runs", func(c *client.Client) error {
				_, err := c.Sessions().Takeover(ctx, s.Session.ID, "r", testAgent)
				return err
			}},
			{"renew", http.MethodPost, "/v1/leases/" + held.Items[0].ID + "/renew", func(c *client.Client) error {
				_, err := c.Leases().Renew(ctx, held.Items[0].ID, s.Run.ID, 0)
				return err
			}},
			{"release", http.MethodDelete, "/v1/leases/", func(c *client.Client) error {
				return c.Leases().Release(ctx, held.Items[0].ID, s.Run.ID)
			}},
			{"drain complete", http.MethodPost, "/v1/drain/complete", func(c *client.Client) error {
				_, err := c.Drain().Complete(ctx, client.CompleteOptions{})
				return err
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				cnt := &counter{method: tc.method, prefix: tc.prefix,
					fake: func(int64) *http.Response { return problemAnswer(http.StatusServiceUnavailable, "store_unavailable") }}
				err := tc.call(d.client(t, d.operator, via(cnt.transport())))
				expectCode(t, err, http.StatusServiceUnavailable, "store_unavailable")
				if n := cnt.n.Load(); n != 1 {
					t.Errorf("sent %d times, want 1", n)
				}
			})
		}
	})
}

// TestReadRetries: reads are retried on transient answers and transport
// failures, within MaxAttempts, honouring Retry-After; lasting answers
// are not retried.
func TestReadRetries(t *testing.T) {
	d := newDaemon(t, storetest.SQLite)
	agent := d.client(t, d.agent)
	s := newSession(t, agent)
	path := "/v1/sessions/" + s.Session.ID

	for _, tc := range []struct {
		name      string
		fake      func(n int64) *http.Response
		drop      func(n int64) bool
		wantTries int64
		wantCode  string // "" for success
		minTook   time.Duration
	}{
		{name: "503 then ok", fake: failFirst(1, http.StatusServiceUnavailable, "store_unavailable"), wantTries: 2},
		{name: "502 and 504", fake: func(n int64) *http.Response {
			switch n {
			case 1:
				return problemAnswer(http.StatusBadGateway, "")
			case 2:
				return problemAnswer(http.StatusGatewayTimeout, "")
			}
			return nil
		}, wantTries: 3},
		{name: "lost answers", drop: func(n int64) bool { return n <= 2 }, wantTries: 3},
		{name: "gives up after MaxAttempts", fake: failFirst(99, http.StatusServiceUnavailable, "store_unavailable"),
			wantTries: 4, wantCode: "store_unavailable"},
		{name: "retry-after honoured", fake: failFirst(1, http.StatusServiceUnavailable, "store_unavailable", "Retry-After", "1"),
			wantTries: 2, minTook: 900 * time.Millisecond},
		{name: "retry-after too long", fake: failFirst(1, http.StatusServiceUnavailable, "store_unavailable", "Retry-After", "3600"),
			wantTries: 1, wantCode: "store_unavailable"},
		{name: "draining lasts", fake: failFirst(1, http.StatusServiceUnavailable, "draining"), wantTries: 1, wantCode: "draining"},
		{name: "not found is final", fake: failFirst(1, http.StatusNotFound, "not_found"), wantTries: 1, wantCode: "not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cnt := &counter{method: http.MethodGet, prefix: path, fake: tc.fake, drop: tc.drop}
			c := d.client(t, d.agent, via(cnt.transport()))
			start := time.Now()
			got, err := c.Sessions().Get(t.Context(), s.Session.ID)
			took := time.Since(start)
			if tc.wantCode == "" {
				if err != nil || got.ID != s.Session.ID {
					t.Fatalf("get: %v", err)
				}
			} else if p := asProblem(t, err); p.Code != tc.wantCode {
				t.Fatalf("code %q, want %q", p.Code, tc.wantCode)
			}
			if n := cnt.n.Load(); n != tc.wantTries {
				t.Errorf("%d tries, want %d", n, tc.wantTries)
			}
			if took < tc.minTook {
				t.Errorf("took %v, want at least %v", took, tc.minTook)
			}
		})
	}

	// A keyed write in flight elsewhere is waited for.
	cnt := &counter{method: http.MethodPost, prefix: path + "/checkpoints",
		fake: failFirst(2, http.StatusConflict, "idempotency_in_flight")}
	w, err := d.client(t, d.agent, via(cnt.transport())).Checkpoints().Write(t.Context(), s.Session.ID, doc(s.Run, "testing"), nil)
	if err != nil || w.Checkpoint.Seq != 1 || cnt.n.Load() != 3 {
		t.Fatalf("write after in-flight answers: %v, %d tries", err, cnt.n.Load())
	}
}

func failFirst(k int64, status int, code string, header ...string) func(int64) *http.Response {
	return func(n int64) *http.Response {
		if n <= k {
			return problemAnswer(status, code, header...)
		}
		return nil
	}
}

// TestCancelStopsRetries: a cancelled ctx ends the retries at once, with
// the ctx's error.
func TestCancelStopsRetries(t *testing.T) {
	d := newDaemon(t, storetest.SQLite)
	cnt := &counter{method: http.MethodGet, prefix: "/v1/sessions",
		fake: func(int64) *http.Response { return problemAnswer(http.StatusServiceUnavailable, "store_unavailable") }}
	c := d.client(t, d.agent, via(cnt.transport()), func(cfg *client.Config) {
		cfg.MaxAttempts, cfg.RetryWait, cfg.RetryMaxWait = 100, 10*time.Second, 10*time.Second
	})
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err := c.Sessions().List(ctx, client.SessionListOptions{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("cancel took %v to stop the retries", took)
	}
	if n := cnt.n.Load(); n != 1 {
		t.Errorf("%d tries before the cancel, want 1", n)
	}

	// A ctx already done sends nothing more than the transport allows.
	cnt.n.Store(0)
	done, stop := context.WithCancel(t.Context())
	stop()
	if _, err := c.Sessions().List(done, client.SessionListOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
}
