package api_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestEndOnBehalf: an operator ends any session in scope without run_id
// (a live run's, a parked one), with a reason that is redacted and recorded
// with the operator token in the event; its leases are released. An agent
// still needs its run_id; a reader cannot end.
func TestEndOnBehalf(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newLeaseHarness(t, b)
		a := h.session()
		l := h.acquire(a, issue(12), 3600)
		path := "/v1/sessions/" + a.id + "/end"

		h.do("POST", path, h.agent, map[string]any{"outcome": "abandoned"}).expect(t, 422, "invalid_request")
		h.do("POST", path, h.reader, map[string]any{"outcome": "abandoned"}).expect(t, 403, "forbidden")
		h.do("POST", path, h.operator, map[string]any{"outcome": "paused"}).expect(t, 422, "invalid_request")
		h.do("POST", path, h.operator, map[string]any{"outcome": "abandoned", "reason": strings.Repeat("r", 2000)}).expect(t, 422, "invalid_request")

		r := h.do("POST", path, h.operator, map[string]any{"outcome": "abandoned", "reason": "agent died; token=" + parkSecret}).expect(t, 200, "")
		if r.str("session", "state") != "ended" || r.str("session", "outcome") != "abandoned" {
			t.Fatalf("ended session: %s", r.raw)
		}
		held := h.do("GET", "/v1/leases?session_id="+a.id+"&state=held", h.reader, nil).expect(t, 200, "")
		if n := len(held.get("items").([]any)); n != 0 {
			t.Errorf("%d leases still held after the end: %s", n, held.raw)
		}
		if g := h.do("GET", "/v1/leases/"+l["id"].(string), h.reader, nil); g.status == 200 && g.str("lease", "state") == "held" {
			t.Errorf("lease still held: %s", g.raw)
		}
		evs := h.events(a.id, 0)
		i := slices.IndexFunc(evs, func(e map[string]any) bool { return e["kind"] == checkpointd.EventSessionEnded })
		if i < 0 {
			t.Fatalf("no session.ended event: %v", eventKinds(evs))
		}
		data := evs[i]["data"].(map[string]any)
		by, _ := data["by"].(map[string]any)
		if evs[i]["run_id"] != a.run || data["outcome"] != "abandoned" || by["name"] != string(checkpointd.RoleOperator) || by["token_id"] == "" ||
			!strings.HasPrefix(data["reason"].(string), "agent died; token=[REDACTED") {
			t.Errorf("session.ended event: %v", evs[i])
		}
		if raw := h.do("GET", "/v1/sessions/"+a.id+"/events?limit=500", h.operator, nil).raw; strings.Contains(string(raw), parkSecret) {
			t.Errorf("the reason's secret is in the event log")
		}
		if k := eventKinds(evs); !slices.Contains(k, checkpointd.EventLeaseReleased) {
			t.Errorf("no lease release recorded: %v", k)
		}
		h.do("POST", path, h.operator, map[string]any{"outcome": "abandoned"}).expect(t, 409, "session_ended")

		// A parked session (no current run) ends on behalf too.
		p := h.session()
		h.do("POST", "/v1/sessions/"+p.id+"/park", h.operator, map[string]any{"reason": "stop"}).expect(t, 200, "")
		h.do("POST", "/v1/sessions/"+p.id+"/end", h.operator, map[string]any{"outcome": "completed", "reason": "done by hand"}).expect(t, 200, "")

		// An agent ends its own session with a reason, redacted too.
		g := h.session()
		h.do("POST", "/v1/sessions/"+g.id+"/end", h.agent, map[string]any{"run_id": g.run, "outcome": "completed", "reason": "ok " + parkSecret}).expect(t, 200, "")
		evs = h.events(g.id, 0)
		last := evs[len(evs)-1]
		if d := last["data"].(map[string]any); last["kind"] != checkpointd.EventSessionEnded || d["by"] != nil || !strings.HasPrefix(d["reason"].(string), "ok [REDACTED") {
			t.Errorf("agent's session.ended event: %v", last)
		}
	})
}
