package client_test

import (
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/client"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestKeepAlive: against the real handler, KeepAlive heartbeats, renews
// the run's leases (one held at the start, one acquired later) at a third
// of their term, reports a lease an operator took away as lost and goes
// on, and stops with the run's loss when another run takes over.
func TestKeepAlive(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		d := newDaemon(t, b)
		var mu sync.Mutex
		calls := map[string]int{}
		var down atomic.Bool
		count := roundTrip(func(r *http.Request) (*http.Response, error) {
			if down.Load() {
				resp := problemAnswer(http.StatusServiceUnavailable, "store_unavailable")
				resp.Request = r
				return resp, nil
			}
			if r.Method == http.MethodPost {
				mu.Lock()
				calls[r.URL.Path]++
				mu.Unlock()
			}
			return http.DefaultTransport.RoundTrip(r)
		})
		agent := d.client(t, d.agent, via(count))
		s := newSession(t, agent)
		acquire := func(r checkpointd.Resource) *checkpointd.Lease {
			l, err := agent.Leases().Acquire(t.Context(), &client.AcquireRequest{Resource: r, SessionID: s.Session.ID, RunID: s.Run.ID, TTLSeconds: 10})
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		pr := acquire(checkpointd.Resource{Kind: checkpointd.ResourcePR, Repo: "acme/widgets", Number: 7})
		losses := agent.KeepAlive(t.Context(), s.Session.ID, s.Run.ID, &client.KeepAliveOptions{Heartbeat: 100 * time.Millisecond, Retry: 50 * time.Millisecond})
		branch := acquire(checkpointd.Resource{Kind: checkpointd.ResourceBranch, Repo: "acme/widgets", Branch: "fix-7"})

		renewals := func(l *checkpointd.Lease) int {
			mu.Lock()
			defer mu.Unlock()
			return calls["/v1/leases/"+l.ID+"/renew"]
		}
		deadline := time.Now().Add(15 * time.Second)
		for renewals(pr) < 2 || renewals(branch) < 2 {
			if time.Now().After(deadline) {
				t.Fatalf("renewals after 15s: pr %d, branch %d; want 2 each (now and a third of 10s later)", renewals(pr), renewals(branch))
			}
			time.Sleep(50 * time.Millisecond)
		}
		mu.Lock()
		beats := calls["/v1/sessions/"+s.Session.ID+"/heartbeat"]
		mu.Unlock()
		if beats < 10 {
			t.Errorf("%d heartbeats in over 3 s at 100 ms", beats)
		}
		l, err := d.client(t, d.agent).Leases().List(t.Context(), client.LeaseListOptions{SessionID: s.Session.ID, State: checkpointd.LeaseHeld})
		if err != nil || len(l.Items) != 2 {
			t.Fatalf("held leases: %v %v", l, err)
		}
		for _, held := range l.Items {
			if left := time.Until(held.ExpiresAt); left < 5*time.Second {
				t.Errorf("lease %s expires in %v: not kept renewed", held.ID, left)
			}
		}

		// The daemon cannot reach its store for a while: nothing is lost,
		// nothing reported; the renewals go on after.
		down.Store(true)
		select {
		case loss := <-losses:
			t.Fatalf("a passing outage reported as a loss: %+v", loss)
		case <-time.After(time.Second):
		}
		down.Store(false)
		before := renewals(pr)
		for deadline := time.Now().Add(10 * time.Second); renewals(pr) == before; {
			if time.Now().After(deadline) {
				t.Fatal("no renewal after the outage")
			}
			time.Sleep(50 * time.Millisecond)
		}

		// An operator takes the branch lease away: reported, the rest goes on.
		if err := d.client(t, d.operator).Leases().Release(t.Context(), branch.ID, ""); err != nil {
			t.Fatal(err)
		}
		select {
		case loss := <-losses:
			if loss.LeaseID != branch.ID || asProblem(t, loss.Err).Code != "lease_lost" {
				t.Errorf("the first loss: %+v", loss)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the released lease was never reported lost")
		}

		// Another run takes over: the heartbeat hears run_superseded, the
		// channel reports it and closes.
		if _, err := d.client(t, d.agent).Sessions().Takeover(t.Context(), s.Session.ID, "test", testAgent); err != nil {
			t.Fatal(err)
		}
		var last []client.Loss
		timeout := time.After(10 * time.Second)
		for open := true; open; {
			select {
			case loss, ok := <-losses:
				if !ok {
					open = false
					break
				}
				last = append(last, loss)
			case <-timeout:
				t.Fatalf("KeepAlive did not stop after the takeover; losses %+v", last)
			}
		}
		// A renewal due before the next heartbeat finds the lease moved to
		// the new run: that loss may come first. The run's comes last.
		n := len(last)
		if n == 0 || last[n-1].LeaseID != "" || !strings.Contains(asProblem(t, last[n-1].Err).Code, "run_superseded") {
			t.Errorf("losses after the takeover: %+v, want the run's, run_superseded, last", last)
		}
		for _, l := range last[:max(n-1, 0)] {
			if l.LeaseID == "" || asProblem(t, l.Err).Code != "lease_lost" {
				t.Errorf("a loss before the run's: %+v, want only leases lost to the new run", l)
			}
		}
	})
}
