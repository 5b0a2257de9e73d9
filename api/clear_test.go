package api_test

import (
	"database/sql"
	"net/http"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/api"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestClearSessionAPI: DELETE /v1/sessions/{id} is for operators (401/403
// otherwise, and nothing changes); it answers 204, then 410 gone with the
// tombstone's kind and time (an operator's with the whole tombstone: by,
// reason, removed), 404 for an unknown session. Every later call
// naming the session, write or read, answers 410; new sessions are still
// created; the reason is stored redacted.
func TestClearSessionAPI(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newHarness(t, b)
		id, run, tok := h.newSession()
		h.do("POST", "/v1/sessions/"+id+"/checkpoints", h.agent, checkpointDoc(run, tok)).expect(t, 201, "")
		lease := map[string]any{"resource": map[string]any{"kind": "branch", "repo": "acme/widgets", "branch": "fix-12"},
			"session_id": id, "run_id": run, "ttl_seconds": 60}
		h.do("POST", "/v1/leases", h.agent, lease).expect(t, 201, "")

		h.do("DELETE", "/v1/sessions/"+id, "", nil).expect(t, 401, "unauthorized")
		h.do("DELETE", "/v1/sessions/"+id, h.reader, nil).expect(t, 403, "forbidden")
		h.do("DELETE", "/v1/sessions/"+id, h.agent, nil).expect(t, 403, "forbidden")
		h.do("GET", "/v1/sessions/"+id, h.reader, nil).expect(t, 200, "")
		h.do("DELETE", "/v1/sessions/"+id, h.operator, `{"reason": "x", "extra": 1}`).expect(t, 422, "invalid_request")
		h.do("DELETE", "/v1/sessions/"+id, h.operator, `{"reason": `).expect(t, 400, "invalid_json")
		h.do("GET", "/v1/sessions/"+id, h.reader, nil).expect(t, 200, "")

		secret := "ghp_" + "abcdefghijklmnopqrstuvwxyz0123456789"
		r := h.do("DELETE", "/v1/sessions/"+id, h.operator, map[string]any{"reason": "stuck; token " + secret})
		r.expect(t, http.StatusNoContent, "")
		if len(r.raw) != 0 {
			t.Errorf("204 with a body: %s", r.raw)
		}
		ts, err := h.store.Tombstone(t.Context(), id)
		if err != nil || ts.Kind != checkpointd.TombstoneCleared || ts.By != "operator" || ts.Reason != "stuck; token [REDACTED:github_token]" ||
			ts.Removed.Checkpoints != 1 || ts.Removed.LeasesReleased != 1 {
			t.Errorf("tombstone %+v %v", ts, err)
		}

		// Every caller learns the kind and time; only an operator learns
		// who cleared the session, why and what went (the audit record).
		gone := func(method, path, token string, body any) {
			t.Helper()
			r := h.do(method, path, token, body).expect(t, http.StatusGone, "gone")
			at, _ := time.Parse(time.RFC3339Nano, r.str("at"))
			if r.str("kind") != "cleared" || !at.Equal(ts.At) || r.str("session_id") != id {
				t.Errorf("%s %s: 410 without the tombstone's kind and time: %s", method, path, r.raw)
			}
			if token == h.operator {
				if r.str("by") != "operator" || r.str("reason") != "stuck; token [REDACTED:github_token]" || r.str("repo") != "acme/widgets" ||
					r.num("removed", "checkpoints") != 1 || r.num("removed", "leases_released") != 1 || r.str("session_state") != "active" {
					t.Errorf("%s %s: an operator's 410 without the whole tombstone: %s", method, path, r.raw)
				}
				return
			}
			for _, m := range []string{"reason", "by", "removed", "repo", "session_state"} {
				if r.get(m) != nil {
					t.Errorf("%s %s: a non-operator's 410 tells the tombstone's %s: %s", method, path, m, r.raw)
				}
			}
		}
		gone("POST", "/v1/sessions/"+id+"/checkpoints", h.agent, checkpointDoc(run, tok))
		gone("POST", "/v1/sessions/"+id+"/runs", h.agent, map[string]any{"takeover": true})
		gone("POST", "/v1/sessions/"+id+"/end", h.agent, map[string]any{"run_id": run, "outcome": "abandoned"})
		gone("POST", "/v1/leases", h.agent, lease)
		gone("GET", "/v1/sessions/"+id, h.reader, nil)
		gone("GET", "/v1/sessions/"+id+"/checkpoints", h.reader, nil)
		gone("GET", "/v1/sessions/"+id+"/checkpoints/1", h.reader, nil)
		gone("GET", "/v1/sessions/"+id+"/checkpoints/latest", h.reader, nil)
		gone("GET", "/v1/sessions/"+id+"/events", h.reader, nil)
		gone("GET", "/v1/sessions/"+id+"/resume", h.agent, nil)
		gone("DELETE", "/v1/sessions/"+id, h.operator, nil)
		gone("GET", "/v1/sessions/"+id, h.operator, nil)
		gone("GET", "/v1/sessions/"+id+"/events", h.operator, nil)
		// Outside the caller's scope it is forbidden, as a live session is.
		h.do("GET", "/v1/sessions/"+id, h.token(checkpointd.RoleReader, []string{"other/*"}), nil).expect(t, 403, "forbidden")

		h.do("DELETE", "/v1/sessions/ses_00000000000000000000000000000000", h.operator, nil).expect(t, 404, "not_found")
		h.do("DELETE", "/v1/sessions/not%20an%20id", h.operator, nil).expect(t, 404, "not_found")

		// The lease is free for a new session, which is created as usual.
		id2, run2, _ := h.newSession()
		lease["session_id"], lease["run_id"] = id2, run2
		h.do("POST", "/v1/leases", h.agent, lease).expect(t, 201, "")
	})
}

// TestClearSessionAllOrNothingAPI: a clear that fails in the store (here the
// tombstone insert, after every delete ran) answers 503 store_unavailable
// and leaves the session, its checkpoints, events and lease as they were.
func TestClearSessionAllOrNothingAPI(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		url := storetest.URL(t, b)
		s := storetest.OpenURL(t, url, checkpointd.SystemClock{})
		h := &harness{t: t, store: s}
		h.handler = api.New(api.Deps{Store: api.StoresOf(s), Workflow: checkpointd.DefaultWorkflow(), DigestKey: testDigestKey})
		h.operator = h.token(checkpointd.RoleOperator, nil)
		h.agent = h.token(checkpointd.RoleAgent, []string{"acme/*"})
		id, run, tok := h.newSession()
		h.do("POST", "/v1/sessions/"+id+"/checkpoints", h.agent, checkpointDoc(run, tok)).expect(t, 201, "")
		lr := h.do("POST", "/v1/leases", h.agent, map[string]any{"resource": map[string]any{"kind": "branch", "repo": "acme/widgets", "branch": "fix-12"},
			"session_id": id, "run_id": run, "ttl_seconds": 60}).expect(t, 201, "")

		driver, dsn := "postgres", url
		stmts := []string{`CREATE FUNCTION fail_tombstone() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'injected failure'; END $$`,
			`CREATE TRIGGER fail_tombstone BEFORE INSERT ON tombstones FOR EACH ROW EXECUTE FUNCTION fail_tombstone()`}
		if b == storetest.SQLite {
			driver, dsn = "sqlite", "file:"+url+"?_pragma=busy_timeout(5000)"
			stmts = []string{`CREATE TRIGGER fail_tombstone BEFORE INSERT ON tombstones BEGIN SELECT RAISE(ABORT, 'injected failure'); END`}
		}
		raw, err := sql.Open(driver, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		for _, q := range stmts {
			if _, err := raw.Exec(q); err != nil {
				t.Fatal(err)
			}
		}

		r := h.do("DELETE", "/v1/sessions/"+id, h.operator, map[string]any{"reason": "x"}).expect(t, 503, "store_unavailable")
		if r.str("detail") != "the store cannot be reached; nothing was changed" {
			t.Errorf("503 detail leaks or misleads: %s", r.raw)
		}
		g := h.do("GET", "/v1/sessions/"+id, h.operator, nil).expect(t, 200, "")
		if g.str("session", "state") != "active" || g.num("session", "latest_checkpoint", "seq") != 1 {
			t.Errorf("session after a failed clear: %s", g.raw)
		}
		if n := len(h.do("GET", "/v1/sessions/"+id+"/events", h.operator, nil).expect(t, 200, "").get("items").([]any)); n != 4 {
			t.Errorf("%d events after a failed clear, want 4", n)
		}
		l := h.do("GET", "/v1/leases?session_id="+id, h.operator, nil).expect(t, 200, "")
		items, _ := l.get("items").([]any)
		if len(items) != 1 || items[0].(map[string]any)["id"] != lr.str("lease", "id") || items[0].(map[string]any)["state"] != "held" {
			t.Errorf("leases after a failed clear: %s", l.raw)
		}
	})
}
