package api_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/api"
	"github.com/checkpointd/checkpointd/store/storetest"
)

func TestWriteAndReadCheckpoints(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newHarness(t, b)
		id, run, tok := h.newSession()
		path := "/v1/sessions/" + id

		r := h.do("GET", path+"/resume", h.agent, nil).expect(t, 200, "")
		if r.get("resumable") != false || fmt.Sprint(r.get("reasons")) != "[no_checkpoint]" || r.get("checkpoint") != nil {
			t.Fatalf("resume before any checkpoint: %s", r.raw)
		}

		w1 := h.do("POST", path+"/checkpoints", h.agent, checkpointDoc(run, tok)).expect(t, 201, "")
		if w1.num("checkpoint", "seq") != 1 || w1.get("checkpoint", "parent_seq") != nil || w1.get("checkpoint", "complete") != true ||
			w1.str("checkpoint", "session_id") != id || !strings.HasPrefix(w1.str("checkpoint", "digest"), "hmac-sha256:v1:") {
			t.Fatalf("first checkpoint: %s", w1.raw)
		}
		if w1.header.Get("Location") != path+"/checkpoints/1" {
			t.Errorf("Location %q", w1.header.Get("Location"))
		}
		incomplete := checkpointDoc(run, tok, func(d map[string]any) {
			delete(d, "next_action")
			d["recovery"] = map[string]any{"instructions": "  "}
			d["pending_mutation"] = map[string]any{"kind": "gitea.pr.comment", "summary": "posting the review reply"}
			d["leases"] = []any{map[string]any{"lease_id": "lea_1", "fencing_token": 3}}
		})
		w2 := h.do("POST", path+"/checkpoints", h.agent, incomplete).expect(t, 201, "")
		if w2.num("checkpoint", "parent_seq") != 1 || w2.get("checkpoint", "complete") != false {
			t.Fatalf("second checkpoint: %s", w2.raw)
		}
		if got := fmt.Sprint(w2.get("checkpoint", "missing")); got != "[next_action recovery.instructions pending_mutation.idempotency_key lease:lea_1]" {
			t.Errorf("missing = %s", got)
		}

		latest := h.do("GET", path+"/checkpoints/latest", h.reader, nil).expect(t, 200, "")
		if latest.num("checkpoint", "seq") != 2 || latest.str("checkpoint", "validity") != "lease_lost" {
			t.Fatalf("latest: %s", latest.raw)
		}
		first := h.do("GET", path+"/checkpoints/1", h.reader, nil).expect(t, 200, "")
		if first.str("checkpoint", "workspace", "head") != "0123456789abcdef0123456789abcdef01234567" || first.str("checkpoint", "validity") != "superseded" {
			t.Fatalf("checkpoint 1: %s", first.raw)
		}
		h.do("GET", path+"/checkpoints/3", h.reader, nil).expect(t, 404, "not_found")
		h.do("GET", path+"/checkpoints/0", h.reader, nil).expect(t, 404, "not_found")
		h.do("GET", path+"/checkpoints/x", h.reader, nil).expect(t, 404, "not_found")

		list := h.do("GET", path+"/checkpoints?limit=1", h.reader, nil).expect(t, 200, "")
		items := list.get("items").([]any)
		if len(items) != 1 || items[0].(map[string]any)["seq"].(float64) != 2 {
			t.Fatalf("history page 1: %s", list.raw)
		}
		list2 := h.do("GET", path+"/checkpoints?limit=1&cursor="+list.str("next_cursor"), h.reader, nil).expect(t, 200, "")
		if items := list2.get("items").([]any); len(items) != 1 || items[0].(map[string]any)["seq"].(float64) != 1 {
			t.Fatalf("history page 2: %s", list2.raw)
		}

		res := h.do("GET", path+"/resume", h.agent, nil).expect(t, 200, "")
		if res.get("resumable") != false || res.str("validity") != "lease_lost" || res.num("checkpoint", "seq") != 2 ||
			res.str("pending_mutation", "outcome") != "unknown" || !strings.Contains(res.str("pending_mutation", "reason"), "no forge") {
			t.Fatalf("resume: %s", res.raw)
		}
		if got := fmt.Sprint(res.get("reasons")); !strings.Contains(got, "lease_lost") || !strings.Contains(got, "incomplete") || !strings.Contains(got, "pending_mutation_outcome_unknown") {
			t.Errorf("resume reasons %s", got)
		}
		h.do("GET", path+"/resume", h.reader, nil).expect(t, 403, "forbidden")
	})
}

func TestRejectedCheckpoints(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newHarness(t, b)
		id, run, tok := h.newSession()
		path := "/v1/sessions/" + id + "/checkpoints"
		cases := []struct {
			name   string
			body   any
			status int
			code   string
		}{
			{"malformed", `{"schema_version": 1,`, 400, "invalid_json"},
			{"unknown top-level field", checkpointDoc(run, tok, func(d map[string]any) { d["notes"] = "x" }), 422, "invalid_checkpoint"},
			{"unknown nested field", checkpointDoc(run, tok, func(d map[string]any) { d["workspace"].(map[string]any)["hed"] = "x" }), 422, "invalid_checkpoint"},
			{"wrong type", checkpointDoc(run, tok, func(d map[string]any) { d["fencing_token"] = "1" }), 422, "invalid_checkpoint"},
			{"bad head", checkpointDoc(run, tok, func(d map[string]any) { d["workspace"].(map[string]any)["head"] = "abc" }), 422, "invalid_checkpoint"},
			{"unconfigured stage", checkpointDoc(run, tok, func(d map[string]any) { d["stage"] = "deploying" }), 422, "invalid_checkpoint"},
			{"other repo", checkpointDoc(run, tok, func(d map[string]any) { d["target"] = map[string]any{"repo": "acme/other"} }), 422, "invalid_checkpoint"},
			{"other role", checkpointDoc(run, tok, func(d map[string]any) { d["role"] = "reviewer" }), 422, "invalid_checkpoint"},
			{"stale fencing token", checkpointDoc(run, tok+1), 409, "run_superseded"},
			{"unknown run", checkpointDoc("run_nope", tok), 409, "run_superseded"},
			{"too large", checkpointDoc(run, tok, func(d map[string]any) { d["note"] = strings.Repeat("n", 9<<10) }), 413, "payload_too_large"},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				r := h.do("POST", path, h.agent, c.body).expect(t, c.status, c.code)
				if c.code == "invalid_checkpoint" && len(r.get("problems").([]any)) == 0 {
					t.Errorf("no problems listed: %s", r.raw)
				}
			})
		}
		stage := h.do("POST", path, h.agent, checkpointDoc(run, tok, func(d map[string]any) { d["stage"] = "deploying" }))
		if !strings.Contains(string(stage.raw), "configured stages: planned, implementing") {
			t.Errorf("unconfigured stage answer does not list the configured stages: %s", stage.raw)
		}
		h.do("POST", "/v1/sessions/ses_nope/checkpoints", h.agent, checkpointDoc(run, tok)).expect(t, 404, "not_found")
		outsider := h.token(checkpointd.RoleAgent, []string{"evil/*"})
		h.do("POST", path, outsider, checkpointDoc(run, tok)).expect(t, 403, "forbidden")
		h.do("POST", path, h.reader, checkpointDoc(run, tok)).expect(t, 403, "forbidden")

		// Nothing above was stored.
		r := h.do("GET", "/v1/sessions/"+id+"/checkpoints", h.reader, nil).expect(t, 200, "")
		if n := len(r.get("items").([]any)); n != 0 {
			t.Fatalf("%d checkpoints stored by rejected writes", n)
		}
		ev := h.do("GET", "/v1/sessions/"+id+"/events", h.reader, nil).expect(t, 200, "")
		if n := len(ev.get("items").([]any)); n != 2 {
			t.Fatalf("%d events after rejected writes, want 2", n)
		}
	})
}

func TestHealthSchemaAndRouting(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newHarness(t, b)
		h.do("GET", "/healthz", "", nil).expect(t, 200, "")
		h.do("GET", "/readyz", "", nil).expect(t, 200, "")
		s := h.do("GET", "/v1/schema/checkpoint", "", nil).expect(t, 200, "")
		if s.str("$schema") == "" || s.get("properties", "workspace") == nil {
			t.Fatalf("schema: %.200s", s.raw)
		}
		// The configured roles and stages, as enums a client reads first.
		wf := checkpointd.DefaultWorkflow()
		if got, _ := checkpointd.WorkflowOfSchema(s.raw); !cmp.Equal(got, wf) {
			t.Errorf("the served schema names the workflow %v, want %v", got, wf)
		}
		h.do("GET", "/v1/nothing", h.operator, nil).expect(t, 404, "not_found")
		h.do("DELETE", "/v1/sessions", h.operator, nil).expect(t, 405, "method_not_allowed")
		r := h.do("POST", "/v1/sessions", h.agent, nil)
		r.expect(t, 400, "invalid_json")

		// Store down: answers 503 store_unavailable, readiness fails, liveness does not.
		id, run, tok := h.newSession()
		h.store.Close()
		h.do("GET", "/healthz", "", nil).expect(t, 200, "")
		h.do("GET", "/readyz", "", nil).expect(t, 503, "store_unavailable")
		down := api.New(api.Deps{Store: api.StoresOf(h.store), Workflow: checkpointd.DefaultWorkflow()})
		h.handler = down
		h.do("POST", "/v1/sessions/"+id+"/checkpoints", h.agent, checkpointDoc(run, tok)).expect(t, 503, "store_unavailable")
	})
}

// TestCorruptCheckpointIs500: a stored document that no longer parses, or
// is not the one written, is not the store being unreachable: reading it answers 500
// checkpoint_corrupt with a generic detail, as a seal that does not open
// does, never 503 store_unavailable (a client would wait and retry).
func TestCorruptCheckpointIs500(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h, _, url := loggedHarness(t, b)
		id, run, tok := h.newSession()
		path := "/v1/sessions/" + id
		for range 4 {
			h.do("POST", path+"/checkpoints", h.agent, checkpointDoc(run, tok)).expect(t, 201, "")
		}
		db, rebind := rawSQL(t, b, url)
		for seq, doc := range map[int]string{1: "not json", 2: `{"schema_version": 1, "stage": 5}`, 3: `{"schema_version": 1, "leases": {}}`} {
			if _, err := db.Exec(rebind(`UPDATE checkpoints SET document = ? WHERE session_id = ? AND seq = ?`), doc, id, seq); err != nil {
				t.Fatal(err)
			}
		}
		// Damage that still parses: the digest written with the document tells.
		if _, err := db.Exec(rebind(`UPDATE checkpoints SET document = replace(document, 'implementing', 'implementinG') WHERE session_id = ? AND seq = 4`), id); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"/checkpoints/1", "/checkpoints/2", "/checkpoints/3", "/checkpoints/4", "/checkpoints/latest", "/resume"} {
			r := h.do("GET", path+p, h.agent, nil).expect(t, 500, "checkpoint_corrupt")
			if d := r.str("detail"); d != "the stored checkpoint cannot be read back whole; see the daemon log" {
				t.Errorf("GET %s: detail %q", p, d)
			}
		}
	})
}

// TestSchemaVersions: the schema is published by version; no version and
// version=1 are v1, a version this daemon does not publish is 404 (never v1
// under another number), and a version that is not an integer is 422 invalid_request, as every
// malformed query parameter is.
func TestSchemaVersions(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newHarness(t, b)
		plain := h.do("GET", "/v1/schema/checkpoint", "", nil).expect(t, 200, "")
		v1 := h.do("GET", "/v1/schema/checkpoint?version=1", "", nil).expect(t, 200, "")
		if string(plain.raw) != string(v1.raw) || v1.str("$schema") == "" {
			t.Fatalf("version=1 is not the default schema: %.200s", v1.raw)
		}
		for _, v := range []string{"2", "0", "-1", "999999999999999999999"} {
			h.do("GET", "/v1/schema/checkpoint?version="+v, "", nil).expect(t, 404, "not_found")
		}
		for _, v := range []string{"two", "1.0", "", "1x"} {
			h.do("GET", "/v1/schema/checkpoint?version="+v, "", nil).expect(t, 422, "invalid_request")
		}
	})
}
