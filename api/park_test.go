package api_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/api"
	"github.com/checkpointd/checkpointd/store/storetest"
)

const parkSecret = "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB"

// TestPark: an operator parks a session; its run is fenced off as by a
// takeover (every later call is refused), the session stays active with
// no current run, a second park finds none (409), the event names the
// operator token and the redacted reason, and the next run picks up the
// leases with new fencing tokens.
func TestPark(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newLeaseHarness(t, b)
		a := h.session()
		l := h.acquire(a, issue(12), 3600)
		h.do("POST", "/v1/sessions/"+a.id+"/checkpoints", h.agent, checkpointDoc(a.run, a.tok)).expect(t, 201, "")
		path := "/v1/sessions/" + a.id + "/park"

		h.do("POST", path, h.operator, map[string]any{}).expect(t, 422, "invalid_request")
		h.do("POST", path, h.agent, map[string]any{"reason": "x"}).expect(t, 403, "forbidden")
		h.do("POST", "/v1/sessions/ses_nope/park", h.operator, map[string]any{"reason": "x"}).expect(t, 404, "not_found")

		r := h.do("POST", path, h.operator, map[string]any{"reason": "agent crashed, token=" + parkSecret}).expect(t, 200, "")
		if r.get("session", "parked") != true || r.get("session", "current_run") != nil || r.str("session", "state") != "active" {
			t.Fatalf("parked session: %s", r.raw)
		}
		if strings.Contains(string(r.raw), parkSecret) {
			t.Errorf("the reason's secret is echoed: %s", r.raw)
		}

		// The parked run is fenced off.
		h.do("POST", "/v1/sessions/"+a.id+"/checkpoints", h.agent, checkpointDoc(a.run, a.tok)).expect(t, 409, "run_superseded")
		h.do("POST", "/v1/sessions/"+a.id+"/heartbeat", h.agent, map[string]any{"run_id": a.run}).expect(t, 409, "run_superseded")
		h.do("POST", "/v1/sessions/"+a.id+"/end", h.agent, map[string]any{"run_id": a.run, "outcome": "completed"}).expect(t, 409, "run_superseded")
		h.do("POST", "/v1/leases", h.agent, leaseReq(a, issue(13), 60)).expect(t, 409, "run_superseded")
		h.do("POST", "/v1/leases/"+l["id"].(string)+"/renew", h.agent, map[string]any{"run_id": a.run, "ttl_seconds": 60}).expect(t, 409, "lease_lost")
		h.do("DELETE", "/v1/leases/"+l["id"].(string)+"?run_id="+a.run, h.agent, nil).expect(t, 409, "lease_lost")

		h.do("POST", path, h.operator, map[string]any{"reason": "again"}).expect(t, 409, "no_current_run")

		evs := h.events(a.id, 0)
		i := slices.IndexFunc(evs, func(e map[string]any) bool { return e["kind"] == checkpointd.EventRunParked })
		if i < 0 {
			t.Fatalf("no run.parked event: %v", eventKinds(evs))
		}
		data := evs[i]["data"].(map[string]any)
		by, _ := data["by"].(map[string]any)
		if evs[i]["run_id"] != a.run || by["name"] != string(checkpointd.RoleOperator) || by["token_id"] == "" ||
			!strings.HasPrefix(data["reason"].(string), "agent crashed, token=[REDACTED") {
			t.Errorf("run.parked event: %v", evs[i])
		}
		if raw := h.do("GET", "/v1/sessions/"+a.id+"/events?limit=500", h.operator, nil).raw; strings.Contains(string(raw), parkSecret) {
			t.Errorf("the reason's secret is in the event log")
		}

		// The resume tells the next run what it resumes; the session is
		// still resumable material.
		res := h.do("GET", "/v1/sessions/"+a.id+"/resume", h.agent, nil).expect(t, 200, "")
		if res.get("parked") != true || res.get("run") != nil || res.get("checkpoint") == nil {
			t.Errorf("resume of a parked session: %s", res.raw)
		}

		// The next run picks up the lease with a new token.
		next := h.do("POST", "/v1/sessions/"+a.id+"/runs", h.agent, map[string]any{"takeover": true, "reason": "restarted"}).expect(t, 201, "")
		newRun := next.str("run", "id")
		if next.num("run", "fencing_token") != a.tok+1 {
			t.Errorf("next run token %d, want %d", next.num("run", "fencing_token"), a.tok+1)
		}
		got := h.do("GET", "/v1/leases/"+l["id"].(string), h.reader, nil)
		if got.status != 200 {
			got = h.do("GET", "/v1/leases?session_id="+a.id+"&state=held", h.reader, nil).expect(t, 200, "")
			items := got.get("items").([]any)
			if len(items) != 1 {
				t.Fatalf("held leases after the next run: %s", got.raw)
			}
			moved := items[0].(map[string]any)
			if moved["id"] != l["id"] || moved["run_id"] != newRun && moved["holder"].(map[string]any)["run_id"] != newRun ||
				moved["fencing_token"].(float64) <= l["fencing_token"].(float64) {
				t.Errorf("lease after the next run: %v (was %v)", moved, l)
			}
		}
		h.do("POST", "/v1/leases/"+l["id"].(string)+"/renew", h.agent, map[string]any{"run_id": newRun, "ttl_seconds": 60}).expect(t, 200, "")
		s := h.do("GET", "/v1/sessions/"+a.id, h.reader, nil).expect(t, 200, "")
		if s.get("session", "parked") != nil || s.str("session", "current_run", "id") != newRun {
			t.Errorf("session after the next run: %s", s.raw)
		}
		if k := eventKinds(h.events(a.id, 0)); !slices.Contains(k, checkpointd.EventRunUnparked) {
			t.Errorf("events after the next run: %v", k)
		}
	})
}

// TestParkWithoutTakeover: a parked session has no current run, so a run
// started without takeover is its next run, not a 409 run_active; an
// ended session cannot be parked.
func TestParkWithoutTakeover(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newLeaseHarness(t, b)
		a := h.session()
		h.do("POST", "/v1/sessions/"+a.id+"/runs", h.agent, map[string]any{}).expect(t, 409, "run_active")
		h.do("POST", "/v1/sessions/"+a.id+"/park", h.operator, map[string]any{"reason": "stop"}).expect(t, 200, "")
		r := h.do("POST", "/v1/sessions/"+a.id+"/runs", h.agent, map[string]any{}).expect(t, 201, "")
		h.do("POST", "/v1/sessions/"+a.id+"/end", h.agent, map[string]any{"run_id": r.str("run", "id"), "outcome": "completed"}).expect(t, 200, "")
		h.do("POST", "/v1/sessions/"+a.id+"/park", h.operator, map[string]any{"reason": "stop"}).expect(t, 409, "session_ended")
	})
}

// TestDrainGateParkedAndUnresponsive: during a drain, a parked session
// blocks only for what its latest checkpoint lacks, never for
// no_checkpoint_since_drain; an unresponsive run's blocking entry carries
// its last_seen_at; park is allowed while draining and a takeover is not.
func TestDrainGateParkedAndUnresponsive(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		clock := checkpointd.NewManualClock(leaseT0)
		s := storetest.Open(t, b, clock)
		h := newDrainHarness(t, s, s, func(d *api.Deps) {})
		head := "0123456789abcdef0123456789abcdef01234567"
		good := h.agentSession("good", "acme/widgets", "author", "good")
		half := h.agentSession("half", "acme/widgets", "author", "half")
		gone := h.agentSession("gone", "acme/widgets", "author", "gone")
		for _, a := range []*agentSession{good, half, gone} {
			h.push(a, head)
		}
		h.checkpoint(good, good.doc(head)).expect(t, 201, "")
		h.checkpoint(half, half.doc(head, func(d map[string]any) { delete(d, "recovery") })).expect(t, 201, "")
		h.checkpoint(gone, gone.doc(head)).expect(t, 201, "")
		h.do("POST", "/v1/drain", h.operator, map[string]any{"reason": "deploy"}).expect(t, 201, "")
		clock.Advance(checkpointd.DefaultRunLiveness + time.Minute)

		for _, a := range []*agentSession{good, half} {
			h.do("POST", "/v1/sessions/"+a.id+"/park", h.operator, map[string]any{"reason": "agent gone"}).expect(t, 200, "")
		}
		h.do("POST", "/v1/sessions/"+good.id+"/runs", h.agent, map[string]any{"takeover": true}).expect(t, 503, "draining")

		v := h.drainView(h.operator)
		want := map[string][]checkpointd.BlockReason{
			"half": {checkpointd.BlockIncomplete},
			"gone": {checkpointd.BlockNoCheckpoint},
		}
		if diff := cmp.Diff(want, blockingBy(v.Blocking, good, half, gone)); diff != "" {
			t.Fatalf("blocking (-want +got):\n%s", diff)
		}
		for _, bl := range v.Blocking {
			switch bl.SessionID {
			case half.id:
				if !bl.Parked || bl.Live != nil || bl.LastSeenAt != nil || !slices.Contains(bl.Missing, "recovery.instructions") {
					t.Errorf("parked entry: %+v", bl)
				}
			case gone.id:
				if bl.Parked || bl.Live == nil || *bl.Live || bl.LastSeenAt == nil || !bl.LastSeenAt.Equal(leaseT0) {
					t.Errorf("unresponsive entry: %+v", bl)
				}
			}
		}
		r := h.do("POST", "/v1/drain/complete", h.operator, nil).expect(t, 409, "drain_blocked")
		if strings.Contains(string(r.raw), good.id) {
			t.Errorf("the parked session with a complete, valid checkpoint blocks: %s", r.raw)
		}

		// A call of the unresponsive run makes it live again; its entry
		// then carries no last_seen_at.
		h.do("POST", "/v1/sessions/"+gone.id+"/heartbeat", h.agent, map[string]any{"run_id": gone.run}).expect(t, 200, "")
		for _, bl := range h.drainView(h.operator).Blocking {
			if bl.SessionID == gone.id && (bl.Live == nil || !*bl.Live || bl.LastSeenAt != nil) {
				t.Errorf("live entry: %+v", bl)
			}
		}
	})
}
