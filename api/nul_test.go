package api_test

import (
	"maps"
	"net/url"
	"testing"

	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestNULIsBadInputOnEveryBackend proves a NUL byte (or, in a query, bytes
// that are not UTF-8) in any string the daemon keeps or looks up is the
// same 4xx naming the field on both backends: PostgreSQL refuses NUL in
// text, which used to surface as 503 store_unavailable while SQLite stored it.
func TestNULIsBadInputOnEveryBackend(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newHarness(t, b)
		id, run, tok := h.newSession()

		withNUL := func(edit func(m map[string]any)) map[string]any {
			m := maps.Clone(sessionBody)
			m["agent"] = maps.Clone(sessionBody["agent"].(map[string]any))
			edit(m)
			return m
		}
		bodies := []struct {
			name, method, path, token string
			body                      any
			field                     string
		}{
			{"worktree", "POST", "/v1/sessions", h.agent, withNUL(func(m map[string]any) { m["worktree"] = "/w/\x00x" }), "/worktree"},
			{"branch", "POST", "/v1/sessions", h.agent, withNUL(func(m map[string]any) { m["branch"] = "fix\x00" }), "/branch"},
			{"agent instance", "POST", "/v1/sessions", h.agent, withNUL(func(m map[string]any) { m["agent"].(map[string]any)["instance"] = "h\x00" }), "/agent/instance"},
			{"capability", "POST", "/v1/sessions", h.agent, withNUL(func(m map[string]any) { m["capabilities"] = []string{"git\x00"} }), "/capabilities/0"},
			{"takeover reason", "POST", "/v1/sessions/" + id + "/runs", h.agent,
				map[string]any{"takeover": true, "reason": "crash\x00", "agent": sessionBody["agent"]}, "/reason"},
			{"takeover agent", "POST", "/v1/sessions/" + id + "/runs", h.agent,
				map[string]any{"takeover": true, "agent": map[string]any{"runtime": "r\x00"}}, "/agent/runtime"},
			{"lease resource", "POST", "/v1/leases", h.agent,
				map[string]any{"session_id": id, "run_id": run, "resource": map[string]any{"repo": "acme/widgets", "kind": "branch", "branch": "x\x00"}, "ttl_seconds": 60}, "/resource/branch"},
			{"park reason", "POST", "/v1/sessions/" + id + "/park", h.operator, map[string]any{"reason": "gone\x00"}, "/reason"},
			{"end reason", "POST", "/v1/sessions/" + id + "/end", h.agent,
				map[string]any{"run_id": run, "outcome": "abandoned", "reason": "x\x00"}, "/reason"},
			{"drain reason", "POST", "/v1/drain", h.operator, map[string]any{"reason": "deploy\x00"}, "/reason"},
			{"member name", "POST", "/v1/drain", h.operator, map[string]any{"re\x00ason": "deploy"}, ""},
		}
		for _, c := range bodies {
			t.Run(c.name, func(t *testing.T) {
				r := h.do(c.method, c.path, c.token, c.body)
				if r.status >= 500 || r.status < 400 {
					t.Fatalf("status %d, want a 4xx; body %s", r.status, r.raw)
				}
				if c.field != "" && !namesField(r, c.field) {
					t.Errorf("%d %s does not name %s", r.status, r.raw, c.field)
				}
			})
		}

		// A document's fields that bind the session or fill its columns
		// refuse NUL, on both backends, naming the field.
		for field, edit := range map[string]func(d map[string]any){
			"/workspace/branch": func(d map[string]any) {
				d["workspace"] = map[string]any{"branch": "fix-12\x00", "head": "0123456789abcdef0123456789abcdef01234567"}
			},
			"/workspace/worktree": func(d map[string]any) {
				d["workspace"] = map[string]any{"branch": "fix-12", "worktree": "/w\x00", "head": "0123456789abcdef0123456789abcdef01234567"}
			},
			"/stage":             func(d map[string]any) { d["stage"] = "implementing\x00" },
			"/next_action/actor": func(d map[string]any) { d["next_action"] = map[string]any{"actor": "author\x00", "action": "x"} },
			"/target/repo":       func(d map[string]any) { d["target"] = map[string]any{"repo": "acme/widgets\x00", "issue": 12} },
		} {
			r := h.do("POST", "/v1/sessions/"+id+"/checkpoints", h.agent, checkpointDoc(run, tok, edit)).expect(t, 422, "invalid_checkpoint")
			if !namesField(r, field) {
				t.Errorf("a NUL in %s: %s does not name it", field, r.raw)
			}
		}

		// A NUL in the checkpoint document is text like any other: escaped
		// in JSON, kept and read back on both backends.
		doc := checkpointDoc(run, tok, func(d map[string]any) {
			d["note"] = "a\x00b"
			d["last_action"] = map[string]any{"kind": "edit\x00", "summary": "x\x00y"}
		})
		if r := h.do("POST", "/v1/sessions/"+id+"/checkpoints", h.agent, doc); r.status >= 500 {
			t.Fatalf("checkpoint with NUL: %d %s", r.status, r.raw)
		}
		if r := h.do("GET", "/v1/sessions/"+id+"/checkpoints/latest", h.reader, nil); r.status >= 500 {
			t.Fatalf("latest after NUL: %d %s", r.status, r.raw)
		}

		for _, c := range []struct{ path, param string }{
			{"/v1/sessions?repo=", "repo"}, {"/v1/sessions?stage=", "stage"}, {"/v1/sessions?waiting_on=", "waiting_on"},
			{"/v1/leases?resource=", "resource"}, {"/v1/leases?session_id=", "session_id"},
			{"/v1/errors?kind=", "kind"}, {"/v1/drains?cursor=", "cursor"}, {"/v1/fleet?repo=", "repo"},
		} {
			for _, v := range []string{"a\x00b", "acme/\xff"} {
				t.Run(c.path+url.QueryEscape(v), func(t *testing.T) {
					r := h.do("GET", c.path+url.QueryEscape(v), h.operator, nil)
					if r.status >= 500 {
						t.Fatalf("status %d; body %s", r.status, r.raw)
					}
					if r.status >= 400 && !namesField(r, c.param) {
						t.Errorf("%d %s does not name %s", r.status, r.raw, c.param)
					}
				})
			}
		}
		for _, p := range []string{"/v1/sessions/ses_%00", "/v1/sessions/" + id + "/checkpoints/1%00", "/v1/leases/lse_%00/renew"} {
			if r := h.do("GET", p, h.operator, nil); r.status >= 500 {
				t.Errorf("GET %s: %d %s", p, r.status, r.raw)
			}
		}
	})
}

// namesField reports whether a problem answer names field in its problems.
func namesField(r response, field string) bool {
	ps, _ := r.get("problems").([]any)
	for _, p := range ps {
		if p.(map[string]any)["path"] == field {
			return true
		}
	}
	return false
}
