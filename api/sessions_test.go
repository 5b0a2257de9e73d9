package api_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/checkpointd/checkpointd/store/storetest"
)

func TestCreateSession(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newHarness(t, b)
		r := h.do("POST", "/v1/sessions", h.agent, sessionBody).expect(t, 201, "")
		if r.str("session", "state") != "active" || r.str("session", "validity") != "unverified" || r.num("run", "fencing_token") != 1 {
			t.Fatalf("created session: %s", r.raw)
		}
		if loc := r.header.Get("Location"); loc != "/v1/sessions/"+r.str("session", "id") {
			t.Errorf("Location %q", loc)
		}

		h.do("POST", "/v1/sessions", "", sessionBody).expect(t, 401, "unauthorized")
		h.do("POST", "/v1/sessions", "cpd_not-a-token", sessionBody).expect(t, 401, "unauthorized")
		h.do("POST", "/v1/sessions", h.reader, sessionBody).expect(t, 403, "forbidden")
		other := map[string]any{"repo": "evil/corp", "role": "author"}
		h.do("POST", "/v1/sessions", h.agent, other).expect(t, 403, "forbidden")
		h.do("POST", "/v1/sessions", h.agent, `{"repo": "acme/widgets",`).expect(t, 400, "invalid_json")
		h.do("POST", "/v1/sessions", h.agent, `{"repo": "acme/widgets", "role": "author"} {}`).expect(t, 400, "invalid_json")
		h.do("POST", "/v1/sessions", h.agent, `{"repo": "acme/widgets", "role": "author", "rol": "x"}`).expect(t, 422, "invalid_request")
		h.do("POST", "/v1/sessions", h.agent, `{"repo": "acme/widgets", "role": "author", "agent": {"runtim": "x"}}`).expect(t, 422, "invalid_request")
		h.do("POST", "/v1/sessions", h.agent, `{"repo": "acme/widgets", "role": "author", "issue": "12"}`).expect(t, 422, "invalid_request")
		bad := h.do("POST", "/v1/sessions", h.agent, map[string]any{"repo": "nope", "role": "wizard"}).expect(t, 422, "invalid_request")
		if probs := fmt.Sprint(bad.get("problems")); !strings.Contains(probs, "/repo") || !strings.Contains(probs, "configured roles: author, reviewer, operator") {
			t.Errorf("problems do not name the repo and the configured roles: %s", probs)
		}
		huge := map[string]any{"repo": "acme/widgets", "role": "author", "worktree": strings.Repeat("w", 70<<10)}
		h.do("POST", "/v1/sessions", h.agent, huge).expect(t, 413, "payload_too_large")

		req := h.do("POST", "/v1/sessions", h.agent, nil)
		req.expect(t, 400, "invalid_json")
	})
}

func TestGetAndListSessions(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newHarness(t, b)
		var ids []string
		for i := 0; i < 3; i++ {
			id, _, _ := h.newSession()
			ids = append(ids, id)
		}
		r := h.do("GET", "/v1/sessions/"+ids[0], h.reader, nil).expect(t, 200, "")
		if r.str("session", "id") != ids[0] || r.str("session", "current_run", "id") == "" {
			t.Fatalf("get session: %s", r.raw)
		}
		h.do("GET", "/v1/sessions/ses_00000000000000000000000000000000", h.reader, nil).expect(t, 404, "not_found")
		h.do("GET", "/v1/sessions/not%20an%20id", h.reader, nil).expect(t, 404, "not_found")
		narrow := h.token("reader", []string{"acme/other"})
		h.do("GET", "/v1/sessions/"+ids[0], narrow, nil).expect(t, 403, "forbidden")
		if n := len(h.do("GET", "/v1/sessions", narrow, nil).expect(t, 200, "").get("items").([]any)); n != 0 {
			t.Errorf("out-of-scope reader lists %d sessions", n)
		}

		page1 := h.do("GET", "/v1/sessions?limit=2&state=active&repo=ACME/widgets", h.reader, nil).expect(t, 200, "")
		items := page1.get("items").([]any)
		cur := page1.str("next_cursor")
		if len(items) != 2 || cur == "" {
			t.Fatalf("page 1: %s", page1.raw)
		}
		page2 := h.do("GET", "/v1/sessions?limit=2&cursor="+cur, h.reader, nil).expect(t, 200, "")
		items2 := page2.get("items").([]any)
		if len(items2) != 1 || page2.get("next_cursor") != nil || items2[0].(map[string]any)["id"] != ids[0] {
			t.Fatalf("page 2: %s", page2.raw)
		}
		h.do("GET", "/v1/sessions?limit=0", h.reader, nil).expect(t, 422, "invalid_request")
		h.do("GET", "/v1/sessions?limit=x", h.reader, nil).expect(t, 422, "invalid_request")
		h.do("GET", "/v1/sessions?state=sleeping", h.reader, nil).expect(t, 422, "invalid_request")
		h.do("GET", "/v1/sessions?validity=fine", h.reader, nil).expect(t, 422, "invalid_request")
		h.do("GET", "/v1/sessions?cursor=bm90LWpzb24", h.reader, nil).expect(t, 422, "invalid_request")
		if n := len(h.do("GET", "/v1/sessions?validity=stale", h.reader, nil).expect(t, 200, "").get("items").([]any)); n != 0 {
			t.Errorf("%d stale sessions, want 0", n)
		}
		if n := len(h.do("GET", "/v1/sessions?limit=9999", h.reader, nil).expect(t, 200, "").get("items").([]any)); n != 3 {
			t.Errorf("limit above the cap: %d items", n)
		}
	})
}

func TestRunsAndEnd(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newHarness(t, b)
		id, run1, _ := h.newSession()
		path := "/v1/sessions/" + id
		h.do("POST", path+"/runs", h.agent, map[string]any{}).expect(t, 409, "run_active")
		h.do("POST", path+"/runs", h.reader, map[string]any{"takeover": true}).expect(t, 403, "forbidden")
		h.do("POST", "/v1/sessions/ses_nope/runs", h.agent, map[string]any{"takeover": true}).expect(t, 404, "not_found")
		h.do("POST", path+"/runs", h.agent, map[string]any{"takeover": true, "reason": strings.Repeat("r", 2000)}).expect(t, 422, "invalid_request")
		r := h.do("POST", path+"/runs", h.agent, map[string]any{"takeover": true, "reason": "agent restarted",
			"agent": map[string]any{"runtime": "claude-code"}}).expect(t, 201, "")
		run2 := r.str("run", "id")
		if r.num("run", "fencing_token") != 2 || run2 == run1 {
			t.Fatalf("takeover run: %s", r.raw)
		}
		h.do("POST", path+"/checkpoints", h.agent, checkpointDoc(run1, 1)).expect(t, 409, "run_superseded")
		h.do("POST", path+"/end", h.agent, map[string]any{"run_id": run1, "outcome": "completed"}).expect(t, 409, "run_superseded")
		h.do("POST", path+"/end", h.agent, map[string]any{"run_id": run2, "outcome": "finished"}).expect(t, 422, "invalid_request")
		h.do("POST", path+"/end", h.agent, map[string]any{"outcome": "completed"}).expect(t, 422, "invalid_request")
		end := h.do("POST", path+"/end", h.agent, map[string]any{"run_id": run2, "outcome": "abandoned"}).expect(t, 200, "")
		if end.str("session", "state") != "ended" || end.str("session", "outcome") != "abandoned" {
			t.Fatalf("ended: %s", end.raw)
		}
		h.do("POST", path+"/end", h.agent, map[string]any{"run_id": run2, "outcome": "abandoned"}).expect(t, 409, "session_ended")
		h.do("POST", path+"/runs", h.agent, map[string]any{"takeover": true}).expect(t, 409, "session_ended")
		h.do("POST", path+"/checkpoints", h.agent, checkpointDoc(run2, 2)).expect(t, 409, "session_ended")

		ev := h.do("GET", path+"/events?limit=3", h.reader, nil).expect(t, 200, "")
		items := ev.get("items").([]any)
		if len(items) != 3 || items[0].(map[string]any)["kind"] != "session.created" {
			t.Fatalf("events: %s", ev.raw)
		}
		rest := h.do("GET", path+"/events?cursor="+ev.str("next_cursor"), h.reader, nil).expect(t, 200, "")
		var kinds []string
		for _, it := range rest.get("items").([]any) {
			kinds = append(kinds, it.(map[string]any)["kind"].(string))
		}
		if got := strings.Join(kinds, ","); got != "run.started,session.ended" {
			t.Errorf("events after the cursor: %s", got)
		}
		after := h.do("GET", path+"/events?after=4", h.reader, nil).expect(t, 200, "")
		if n := len(after.get("items").([]any)); n != 1 {
			t.Errorf("events after seq 4: %d", n)
		}
		h.do("GET", path+"/events?after=-1", h.reader, nil).expect(t, 422, "invalid_request")
		h.do("GET", "/v1/sessions/ses_nope/events", h.reader, nil).expect(t, 404, "not_found")
	})
}
