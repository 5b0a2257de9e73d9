package api_test

import (
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// liveness reads the current run's last_seen_at and live from a session read.
func (h *leaseHarness) liveness(id string) (time.Time, any) {
	h.t.Helper()
	r := h.do("GET", "/v1/sessions/"+id, h.reader, nil).expect(h.t, 200, "")
	return at(h.t, r.get("session", "current_run", "last_seen_at")), r.get("session", "current_run", "live")
}

// TestHeartbeat: a heartbeat keeps the current run live; the run turns
// unresponsive after --run-liveness without a call (injectable clock), and
// live again on the next one; a superseded run, an ended session and a
// body without run_id are refused.
func TestHeartbeat(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newLeaseHarness(t, b)
		a := h.session()
		path := "/v1/sessions/" + a.id + "/heartbeat"
		r := h.do("POST", path, h.agent, map[string]any{"run_id": a.run}).expect(t, 200, "")
		if r.str("run", "id") != a.run || r.get("run", "live") != true || !at(t, r.get("run", "last_seen_at")).Equal(leaseT0) {
			t.Fatalf("heartbeat: %s", r.raw)
		}
		if seen, live := h.liveness(a.id); !seen.Equal(leaseT0) || live != true {
			t.Fatalf("fresh run: last_seen_at %v live %v", seen, live)
		}
		h.clock.Advance(checkpointd.DefaultRunLiveness - time.Microsecond)
		if _, live := h.liveness(a.id); live != true {
			t.Fatalf("a microsecond before --run-liveness: live %v", live)
		}
		h.clock.Advance(time.Microsecond)
		if seen, live := h.liveness(a.id); !seen.Equal(leaseT0) || live != false {
			t.Fatalf("after --run-liveness: last_seen_at %v live %v, want %v false", seen, live, leaseT0)
		}
		r = h.do("POST", path, h.agent, map[string]any{"run_id": a.run}).expect(t, 200, "")
		if r.get("run", "live") != true || !at(t, r.get("run", "last_seen_at")).Equal(h.clock.Now()) {
			t.Fatalf("heartbeat of an unresponsive run: %s", r.raw)
		}
		if seen, live := h.liveness(a.id); !seen.Equal(h.clock.Now()) || live != true {
			t.Fatalf("after the heartbeat: last_seen_at %v live %v", seen, live)
		}

		h.do("POST", path, h.agent, map[string]any{}).expect(t, 422, "invalid_request")
		h.do("POST", path, h.reader, map[string]any{"run_id": a.run}).expect(t, 403, "forbidden")
		next := h.do("POST", "/v1/sessions/"+a.id+"/runs", h.agent, map[string]any{"takeover": true}).expect(t, 201, "")
		h.do("POST", path, h.agent, map[string]any{"run_id": a.run}).expect(t, 409, "run_superseded")
		newRun := next.str("run", "id")
		h.do("POST", "/v1/sessions/"+a.id+"/end", h.agent, map[string]any{"run_id": newRun, "outcome": "completed"}).expect(t, 200, "")
		h.do("POST", path, h.agent, map[string]any{"run_id": newRun}).expect(t, 409, "session_ended")
	})
}

// TestEveryCallOfTheRunIsASighting: a checkpoint write, a lease
// acquisition, renewal and release, and a resume that names its run each
// bring an unresponsive run back to live, at the call's time.
func TestEveryCallOfTheRunIsASighting(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newLeaseHarness(t, b)
		a := h.session()
		other := h.session()
		h.acquire(other, issue(13), 3600)
		var leaseID string
		calls := []struct {
			name string
			call func()
		}{
			{"checkpoint write", func() {
				h.do("POST", "/v1/sessions/"+a.id+"/checkpoints", h.agent, checkpointDoc(a.run, a.tok)).expect(t, 201, "")
			}},
			// An agent waiting for a lease another holds is alive: its
			// refused acquire is a sighting too.
			{"lease acquire refused", func() {
				h.do("POST", "/v1/leases", h.agent, map[string]any{"resource": issue(13), "session_id": a.id,
					"run_id": a.run, "ttl_seconds": 600}).expect(t, 409, "lease_held")
			}},
			{"lease acquire", func() { leaseID = h.acquire(a, issue(12), 3600)["id"].(string) }},
			{"lease renew", func() {
				h.do("POST", "/v1/leases/"+leaseID+"/renew", h.agent, map[string]any{"run_id": a.run, "ttl_seconds": 3600}).expect(t, 200, "")
			}},
			{"resume naming its run", func() {
				h.do("GET", "/v1/sessions/"+a.id+"/resume?run_id="+a.run, h.agent, nil).expect(t, 200, "")
			}},
			{"lease release", func() {
				h.do("DELETE", "/v1/leases/"+leaseID+"?run_id="+a.run, h.agent, nil).expect(t, 204, "")
			}},
		}
		for _, c := range calls {
			h.clock.Advance(checkpointd.DefaultRunLiveness + time.Second)
			if _, live := h.liveness(a.id); live != false {
				t.Fatalf("before %s: live %v, want false", c.name, live)
			}
			c.call()
			if seen, live := h.liveness(a.id); !seen.Equal(h.clock.Now()) || live != true {
				t.Errorf("after %s: last_seen_at %v live %v, want %v true", c.name, seen, live, h.clock.Now())
			}
		}
		// The resume shows the run's liveness too.
		r := h.do("GET", "/v1/sessions/"+a.id+"/resume", h.agent, nil).expect(t, 200, "")
		if r.str("run", "id") != a.run || r.get("run", "live") != true {
			t.Errorf("resume run: %s", r.raw)
		}
	})
}

// TestSightingsWithinTheRefreshDoNotWrite: heartbeats and named resumes
// less than --run-liveness/10 after the recorded sighting leave it as it
// is (no write); the first one past that records a new one.
func TestSightingsWithinTheRefreshDoNotWrite(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newLeaseHarness(t, b)
		a := h.session()
		refresh := checkpointd.SeenRefresh(checkpointd.DefaultRunLiveness)
		step := refresh / 10
		for i := range 10 {
			h.clock.Advance(step)
			if i%2 == 0 {
				h.do("POST", "/v1/sessions/"+a.id+"/heartbeat", h.agent, map[string]any{"run_id": a.run}).expect(t, 200, "")
			} else {
				h.do("GET", "/v1/sessions/"+a.id+"/resume?run_id="+a.run, h.agent, nil).expect(t, 200, "")
			}
			if seen, _ := h.liveness(a.id); !seen.Equal(leaseT0) {
				t.Fatalf("call %d, %v after the sighting: last_seen_at moved to %v", i, h.clock.Now().Sub(leaseT0), seen)
			}
		}
		h.clock.Advance(time.Microsecond)
		r := h.do("POST", "/v1/sessions/"+a.id+"/heartbeat", h.agent, map[string]any{"run_id": a.run}).expect(t, 200, "")
		if !at(t, r.get("run", "last_seen_at")).Equal(h.clock.Now()) {
			t.Fatalf("past the refresh: %s", r.raw)
		}
		if seen, _ := h.liveness(a.id); !seen.Equal(h.clock.Now()) {
			t.Errorf("past the refresh: last_seen_at %v, want %v", seen, h.clock.Now())
		}
	})
}
