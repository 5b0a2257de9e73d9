package mcp_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/api"
	"github.com/checkpointd/checkpointd/mcp"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
	"github.com/checkpointd/checkpointd/webhook"
)

// daemon is the API with /mcp beside it on a real HTTP server.
type daemon struct {
	t     *testing.T
	URL   string
	store *store.Store
}

// webhookSecret signs the test's push deliveries.
const webhookSecret = "mcp-test-secret"

func newDaemon(t *testing.T, b storetest.Backend) *daemon {
	t.Helper()
	s := storetest.Open(t, b, checkpointd.SystemClock{})
	apiHandler := api.New(api.Deps{Store: api.StoresOf(s), Workflow: checkpointd.DefaultWorkflow(), DigestKey: []byte("0123456789abcdef0123456789abcdef"),
		Webhook: &webhook.Handler{Verifier: &webhook.Verifier{Secrets: [][]byte{[]byte(webhookSecret)}}, Store: s}})
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.Handler(mcp.HTTPDeps{API: apiHandler, Authenticate: s.Authenticate, Version: "test", Workflow: checkpointd.DefaultWorkflow()}))
	mux.Handle("/", apiHandler)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &daemon{t: t, URL: srv.URL, store: s}
}

func (d *daemon) token(role checkpointd.TokenRole, scope ...string) string {
	d.t.Helper()
	secret := checkpointd.NewTokenSecret()
	if _, err := d.store.CreateToken(d.t.Context(), checkpointd.TokenSpec{Name: "mcp-" + string(role), Role: role, Scope: scope}, checkpointd.HashToken(secret)); err != nil {
		d.t.Fatal(err)
	}
	return secret
}

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// connect opens an MCP session with the SDK's own client over HTTP.
func (d *daemon) connect(t *testing.T, token string, opts *sdk.ClientOptions) *sdk.ClientSession {
	t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: "test-agent", Version: "1"}, opts)
	cs, err := c.Connect(t.Context(), &sdk.StreamableClientTransport{Endpoint: d.URL + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{token}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// call calls a tool and checks its structured output against the tool's
// declared output schema.
type caller struct {
	t       *testing.T
	cs      *sdk.ClientSession
	schemas map[string]*jsonschema.Schema
}

func newCaller(t *testing.T, cs *sdk.ClientSession) *caller {
	t.Helper()
	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &caller{t: t, cs: cs, schemas: map[string]*jsonschema.Schema{}}
	answers := mcp.AnswerSchemas()
	for _, tool := range tools.Tools {
		c.schemas[tool.Name+"/in"] = compile(t, tool.Name+"-in", tool.InputSchema)
		c.schemas[tool.Name+"/outline"] = compile(t, tool.Name+"-outline", tool.OutputSchema)
		c.schemas[tool.Name] = compile(t, tool.Name, answers[tool.Name])
	}
	return c
}

func compile(t *testing.T, name string, schema any) *jsonschema.Schema {
	t.Helper()
	raw, _ := json.Marshal(schema)
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	comp := jsonschema.NewCompiler()
	comp.AssertFormat()
	url := "mem://" + name + ".json"
	if err := comp.AddResource(url, doc); err != nil {
		t.Fatal(err)
	}
	s, err := comp.Compile(url)
	if err != nil {
		t.Fatalf("the schema of %s does not compile: %v", name, err)
	}
	return s
}

// call returns the tool's structured output, or its error result. The
// arguments must fit the tool's input schema (the test checks its own).
func (c *caller) call(name string, args map[string]any) (map[string]any, *toolError) {
	c.t.Helper()
	raw, _ := json.Marshal(args)
	in, _ := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err := c.schemas[name+"/in"].Validate(in); err != nil {
		c.t.Fatalf("%s: the test's arguments break the tool's input schema: %v", name, err)
	}
	return c.callUnchecked(name, args)
}

// callUnchecked sends arguments as a careless model might.
func (c *caller) callUnchecked(name string, args map[string]any) (map[string]any, *toolError) {
	c.t.Helper()
	res, err := c.cs.CallTool(c.t.Context(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		c.t.Fatalf("%s: a protocol error, want a tool result: %v", name, err)
	}
	if res.IsError {
		var te toolError
		text := res.Content[0].(*sdk.TextContent).Text
		if err := json.Unmarshal([]byte(text), &te); err != nil || te.Code == "" {
			c.t.Fatalf("%s: an error result without a problem code: %s", name, text)
		}
		return nil, &te
	}
	b, _ := json.Marshal(res.StructuredContent)
	v, _ := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	for _, schema := range []string{name + "/outline", name} {
		if err := c.schemas[schema].Validate(v); err != nil {
			c.t.Errorf("%s: the output breaks the schema %s: %v\n%s", name, schema, err, b)
		}
	}
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return out, nil
}

type problem struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

type toolError struct {
	Problems []problem       `json:"problems"`
	Status   int             `json:"status"`
	Code     string          `json:"code"`
	Detail   string          `json:"detail"`
	Next     string          `json:"next"`
	Extra    json.RawMessage `json:"extra"`
}

func (c *caller) must(name string, args map[string]any) map[string]any {
	c.t.Helper()
	out, te := c.call(name, args)
	if te != nil {
		c.t.Fatalf("%s: %s: %s", name, te.Code, te.Detail)
	}
	return out
}

func get(v any, path ...string) any {
	for _, p := range path {
		m, _ := v.(map[string]any)
		v = m[p]
	}
	return v
}

func str(v any, path ...string) string { s, _ := get(v, path...).(string); return s }

const head = "0123456789abcdef0123456789abcdef01234567"

func checkpoint(run string, token float64, stage string) map[string]any {
	return map[string]any{"schema_version": 1, "run_id": run, "fencing_token": token, "role": "author", "stage": stage,
		"identity":    map[string]any{"runtime": "test"},
		"target":      map[string]any{"repo": "acme/widgets", "issue": 12},
		"workspace":   map[string]any{"worktree": "/w/1", "branch": "fix-12", "head": head, "base": "main"},
		"next_action": map[string]any{"actor": "author", "action": "run the tests"},
		"recovery":    map[string]any{"instructions": "git checkout fix-12; make test"}}
}

func TestUnauthenticatedAndForeignOrigin(t *testing.T) {
	d := newDaemon(t, storetest.SQLite)
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	post := func(header ...string) *http.Response {
		req, _ := http.NewRequest("POST", d.URL+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if r := post(); r.StatusCode != http.StatusUnauthorized {
		t.Errorf("no token: %d", r.StatusCode)
	}
	if r := post("Authorization", "Bearer cpd_unknown"); r.StatusCode != http.StatusUnauthorized {
		t.Errorf("unknown token: %d", r.StatusCode)
	}
	tok := d.token(checkpointd.RoleAgent, "acme/*")
	if r := post("Authorization", "Bearer "+tok, "Origin", "http://evil.example"); r.StatusCode != http.StatusForbidden {
		t.Errorf("a foreign origin: %d", r.StatusCode)
	}
	if r := post("Authorization", "Bearer "+tok, "Origin", d.URL); r.StatusCode != http.StatusOK {
		t.Errorf("a loopback page calling a loopback daemon: %d", r.StatusCode)
	}
}

// TestToolsAnnounced: the tools with honest annotations and
// the published checkpoint schema as checkpoint_write's checkpoint.
func TestToolsAnnounced(t *testing.T) {
	d := newDaemon(t, storetest.SQLite)
	cs := d.connect(t, d.token(checkpointd.RoleAgent, "acme/*"), nil)
	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	type ann struct{ ReadOnly, Destructive, Idempotent bool }
	got := map[string]ann{}
	for _, tool := range tools.Tools {
		a := tool.Annotations
		if a == nil || a.DestructiveHint == nil {
			t.Fatalf("%s: destructiveHint not set explicitly", tool.Name)
		}
		if len(tool.Description) < 80 {
			t.Errorf("%s: a description too short to tell a model when to call it: %q", tool.Name, tool.Description)
		}
		got[tool.Name] = ann{a.ReadOnlyHint, *a.DestructiveHint, a.IdempotentHint}
	}
	want := map[string]ann{
		"session_start": {}, "session_resume": {}, "checkpoint_write": {Idempotent: true},
		"lease_acquire": {}, "lease_renew": {}, "lease_release": {Destructive: true},
		"heartbeat": {Idempotent: true}, "session_end": {Destructive: true},
		"drain_status": {ReadOnly: true, Idempotent: true}, "session_find": {ReadOnly: true, Idempotent: true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tools and annotations (-want +got):\n%s", diff)
	}
	// The configured roles and stages are enums a model reads before its
	// first call.
	wf := checkpointd.DefaultWorkflow()
	for tool, path := range map[string][]string{
		"session_start":          {"properties", "role", "enum"},
		"checkpoint_write":       {"$defs", "checkpoint_document", "properties", "role", "enum"},
		"checkpoint_write/stage": {"$defs", "checkpoint_document", "properties", "stage", "enum"},
	} {
		name, _, _ := strings.Cut(tool, "/")
		want := wf.Roles
		if strings.HasSuffix(tool, "/stage") {
			want = wf.Stages
		}
		for _, announced := range tools.Tools {
			if announced.Name != name {
				continue
			}
			raw, _ := json.Marshal(announced.InputSchema)
			var in any
			_ = json.Unmarshal(raw, &in)
			got, _ := json.Marshal(get(in, path...))
			wantJSON, _ := json.Marshal(want)
			if string(got) != string(wantJSON) {
				t.Errorf("%s: %v is %s, want %s", name, path, got, wantJSON)
			}
		}
	}
	for _, tool := range tools.Tools {
		if tool.Name != "checkpoint_write" {
			continue
		}
		raw, _ := json.Marshal(tool.InputSchema)
		var in struct {
			Properties map[string]map[string]any  `json:"properties"`
			Defs       map[string]json.RawMessage `json:"$defs"`
		}
		_ = json.Unmarshal(raw, &in)
		if in.Properties["checkpoint"]["$ref"] != "#/$defs/checkpoint_document" {
			t.Errorf("checkpoint is %v", in.Properties["checkpoint"])
		}
		var published, bundled map[string]any
		_ = json.Unmarshal(checkpointd.CheckpointSchemaJSON, &published)
		_ = json.Unmarshal(in.Defs["checkpoint_document"], &bundled)
		if published["title"] != bundled["title"] || cmp.Diff(keys(published["properties"]), keys(bundled["properties"])) != "" {
			t.Error("checkpoint_write's checkpoint is not the published schema")
		}
	}
}

func keys(v any) []string {
	m, _ := v.(map[string]any)
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestAgentLoop calls every tool through the SDK's client, on both
// backends, checking every answer against the tool's output schema, and
// the failures as tool errors with their problem code.
func TestAgentLoop(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		d := newDaemon(t, b)
		agent := newCaller(t, d.connect(t, d.token(checkpointd.RoleAgent, "acme/*"), nil))

		started := agent.must("session_start", map[string]any{"repo": "acme/widgets", "role": "author", "issue": 12, "branch": "fix-12",
			"agent": map[string]any{"runtime": "test", "instance": "host-1/pid-1"}, "idempotency_key": "task-12"})
		sid, run := str(started, "session", "id"), str(started, "run", "id")
		// The agent restarts (a new process, a new instance) and starts
		// the same task with the same key: it gets its session back.
		again := agent.must("session_start", map[string]any{"repo": "acme/widgets", "role": "author", "issue": 12, "branch": "fix-12",
			"agent": map[string]any{"runtime": "test", "instance": "host-1/pid-2"}, "idempotency_key": "task-12"})
		if str(again, "session", "id") != sid || str(again, "run", "id") != run {
			t.Errorf("a restarted agent's session_start with the same key: %v, want session %s run %s", again, sid, run)
		}
		// The key with another target names the session it belongs to.
		if _, te := agent.call("session_start", map[string]any{"repo": "acme/widgets", "role": "author", "issue": 13,
			"agent": map[string]any{"runtime": "test"}, "idempotency_key": "task-12"}); te == nil || te.Code != "idempotency_conflict" ||
			!strings.Contains(string(te.Extra), sid) || !strings.Contains(te.Detail, sid) {
			t.Errorf("the key reused for another issue: %+v", te)
		}
		lease := agent.must("lease_acquire", map[string]any{"resource": map[string]any{"kind": "branch", "repo": "acme/widgets", "branch": "fix-12"},
			"session_id": sid, "run_id": run, "ttl_seconds": 600})
		leaseID := str(lease, "lease", "id")
		agent.must("lease_renew", map[string]any{"lease_id": leaseID, "run_id": run, "ttl_seconds": 900})
		// A numeric string where the schema says integer is the number the
		// model meant; anything else is refused in the schema's words.
		if out, te := agent.callUnchecked("lease_renew", map[string]any{"lease_id": leaseID, "run_id": run, "ttl_seconds": "900"}); te != nil ||
			get(out, "lease", "ttl_seconds") != 900.0 {
			t.Errorf("ttl_seconds as a numeric string: %v %+v", out, te)
		}
		for args, want := range map[string]problem{
			`{"ttl_seconds":"ten minutes"}`: {"/ttl_seconds", "must be an integer, not a string"},
			`{"ttl_seconds":true}`:          {"/ttl_seconds", "must be an integer, not a boolean"},
			`{"ttl":600}`:                   {"/ttl", "is not an argument of this tool"},
		} {
			var m map[string]any
			_ = json.Unmarshal([]byte(args), &m)
			m["lease_id"], m["run_id"] = leaseID, run
			_, te := agent.callUnchecked("lease_renew", m)
			if te == nil || te.Code != "invalid_request" || len(te.Problems) != 1 || te.Problems[0] != want ||
				strings.Contains(te.Detail, "Go struct") {
				t.Errorf("lease_renew %s: %+v, want invalid_request with the problem %+v", args, te, want)
			}
		}
		w := agent.must("checkpoint_write", map[string]any{"session_id": sid, "idempotency_key": "ck-1", "checkpoint": checkpoint(run, 1, "implementing")})
		if get(w, "checkpoint", "seq") != 1.0 || get(w, "checkpoint", "complete") != true {
			t.Errorf("written: %v", w)
		}
		if hb := agent.must("heartbeat", map[string]any{"session_id": sid, "run_id": run}); get(hb, "run", "live") != true {
			t.Errorf("heartbeat: %v", hb)
		}
		if _, te := agent.callUnchecked("checkpoint_write", map[string]any{"session_id": sid, "checkpoint": map[string]any{"schema_version": 1}}); te == nil ||
			te.Code != "invalid_checkpoint" || te.Next == "" {
			t.Errorf("an invalid checkpoint: %+v", te)
		}

		r := agent.must("session_resume", map[string]any{"session_id": sid})
		if get(r, "resumable") != false || get(r, "validity") != "unverified" {
			t.Errorf("resume before evidence: %v", r)
		}
		// The agent crashed: a new run takes over; the old one is fenced off.
		taken := agent.must("session_resume", map[string]any{"session_id": sid, "takeover": true, "reason": "agent restarted",
			"agent": map[string]any{"runtime": "test"}})
		run2 := str(taken, "run", "id")
		if run2 == "" || run2 == run || get(taken, "run", "fencing_token") != 2.0 {
			t.Fatalf("takeover: %v", taken)
		}
		// The answer hands back the moved lease under its new token.
		moved, _ := get(taken, "leases").([]any)
		if len(moved) != 1 || str(moved[0], "id") != leaseID || str(moved[0], "holder", "run_id") != run2 || get(moved[0], "fencing_token") != 2.0 {
			t.Fatalf("takeover leases: %v", get(taken, "leases"))
		}
		named := checkpoint(run2, 2, "implementing")
		named["leases"] = []any{map[string]any{"lease_id": leaseID, "fencing_token": 2}}
		if w := agent.must("checkpoint_write", map[string]any{"session_id": sid, "checkpoint": named}); get(w, "checkpoint", "complete") != true {
			t.Errorf("a checkpoint naming the moved lease: %v", w)
		}
		// Two agents claim the session at once naming the run they saw:
		// exactly one wins, the other hears run_changed.
		results := make(chan *toolError, 2)
		for range 2 {
			go func() {
				_, te := agent.callUnchecked("session_resume", map[string]any{"session_id": sid, "takeover": true, "if_run": run2,
					"reason": "claim", "agent": map[string]any{"runtime": "test"}})
				results <- te
			}()
		}
		var wins, changed int
		for range 2 {
			switch te := <-results; {
			case te == nil:
				wins++
			case te.Code == "run_changed" && te.Status == 409 && te.Next != "":
				changed++
			default:
				t.Errorf("a claim: %+v", te)
			}
		}
		if wins != 1 || changed != 1 {
			t.Fatalf("two claims: %d won, %d run_changed; want 1 and 1", wins, changed)
		}
		cur, err := d.store.GetSession(t.Context(), sid)
		if err != nil {
			t.Fatal(err)
		}
		run2 = cur.CurrentRun.ID
		if _, te := agent.call("checkpoint_write", map[string]any{"session_id": sid, "checkpoint": checkpoint(run, 1, "testing")}); te == nil ||
			te.Code != "run_superseded" || !strings.Contains(te.Next, "stop") {
			t.Errorf("the superseded run writes: %+v", te)
		}
		if _, te := agent.call("lease_release", map[string]any{"lease_id": leaseID, "run_id": run}); te == nil || te.Code == "" {
			t.Errorf("the old run releases the moved lease: %+v", te)
		}
		agent.must("checkpoint_write", map[string]any{"session_id": sid, "checkpoint": checkpoint(run2, 3, "testing")})
		if ds := agent.must("drain_status", map[string]any{}); get(ds, "draining") != false {
			t.Errorf("drain_status: %v", ds)
		}
		leases, err := d.store.ListLeases(t.Context(), store.LeaseFilter{SessionID: sid, Limit: 10})
		if err != nil || len(leases) != 1 {
			t.Fatalf("leases %v %v", leases, err)
		}
		if rel := agent.must("lease_release", map[string]any{"lease_id": leases[0].ID, "run_id": run2}); get(rel, "released") != true {
			t.Errorf("release: %v", rel)
		}
		ended := agent.must("session_end", map[string]any{"session_id": sid, "run_id": run2, "outcome": "completed", "reason": "merged"})
		if str(ended, "session", "state") != "ended" {
			t.Errorf("end: %v", ended)
		}
		if _, te := agent.call("heartbeat", map[string]any{"session_id": sid, "run_id": run2}); te == nil || te.Code != "session_ended" {
			t.Errorf("heartbeat after the end: %+v", te)
		}
		if _, te := agent.call("session_resume", map[string]any{"session_id": "ses_00000000000000000000000000000000"}); te == nil || te.Code != "not_found" {
			t.Errorf("an unknown session: %+v", te)
		}
	})
}

// TestScope: a token sees and acts only within its scope, as over REST.
func TestScope(t *testing.T) {
	d := newDaemon(t, storetest.SQLite)
	other := newCaller(t, d.connect(t, d.token(checkpointd.RoleAgent, "other/*"), nil))
	mine := newCaller(t, d.connect(t, d.token(checkpointd.RoleAgent, "acme/*"), nil))
	s := mine.must("session_start", map[string]any{"repo": "acme/widgets", "role": "author", "agent": map[string]any{}})
	if _, te := other.call("session_resume", map[string]any{"session_id": str(s, "session", "id")}); te == nil || te.Code != "forbidden" {
		t.Errorf("another scope resumes the session: %+v", te)
	} else if strings.Contains(te.Detail+string(te.Extra), "widgets") {
		t.Errorf("the refusal names the session's repository: %+v", te)
	}
	if _, te := other.call("session_start", map[string]any{"repo": "acme/widgets", "role": "author", "agent": map[string]any{}}); te == nil || te.Code != "forbidden" {
		t.Errorf("another scope starts a session in acme: %+v", te)
	}
	reader := newCaller(t, d.connect(t, d.token(checkpointd.RoleReader), nil))
	if _, te := reader.call("session_start", map[string]any{"repo": "acme/widgets", "role": "author", "agent": map[string]any{}}); te == nil || te.Code != "forbidden" {
		t.Errorf("a reader starts a session: %+v", te)
	}
	reader.must("drain_status", map[string]any{})
}

// TestResources: the schema and the sessions in scope.
func TestResources(t *testing.T) {
	d := newDaemon(t, storetest.SQLite)
	tok := d.token(checkpointd.RoleAgent, "acme/*")
	agent := newCaller(t, d.connect(t, tok, nil))
	s := agent.must("session_start", map[string]any{"repo": "acme/widgets", "role": "author", "agent": map[string]any{}})
	sid := str(s, "session", "id")

	cs := d.connect(t, tok, nil)
	list, err := cs.ListResources(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var uris []string
	for _, r := range list.Resources {
		uris = append(uris, r.URI)
	}
	if !contains(uris, mcp.SchemaURI) || !contains(uris, mcp.SessionURI(sid)) {
		t.Errorf("resources %v", uris)
	}
	schema, err := cs.ReadResource(t.Context(), &sdk.ReadResourceParams{URI: mcp.SchemaURI})
	if err != nil || schema.Contents[0].Text != string(checkpointd.DefaultWorkflow().CheckpointSchema()) {
		t.Errorf("the schema resource: %v", err)
	}
	sess, err := cs.ReadResource(t.Context(), &sdk.ReadResourceParams{URI: mcp.SessionURI(sid)})
	if err != nil || !strings.Contains(sess.Contents[0].Text, `"validity":"unverified"`) {
		t.Errorf("the session resource: %v %v", err, sess)
	}
	foreign := d.connect(t, d.token(checkpointd.RoleAgent, "other/*"), nil)
	if _, err := foreign.ReadResource(t.Context(), &sdk.ReadResourceParams{URI: mcp.SessionURI(sid)}); err == nil {
		t.Error("another scope reads the session's resource")
	}
}

func contains(s []string, v string) bool {
	for _, e := range s {
		if e == v {
			return true
		}
	}
	return false
}

// TestSessionFind: a restarted agent finds its session by repo and issue;
// the next actor finds what waits on its role and claims it with if_run,
// and of two reviewers claiming the same handoff exactly one wins.
func TestSessionFind(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		d := newDaemon(t, b)
		author := newCaller(t, d.connect(t, d.token(checkpointd.RoleAgent, "acme/*"), nil))
		started := author.must("session_start", map[string]any{"repo": "acme/widgets", "role": "author", "issue": 12, "branch": "fix-12",
			"agent": map[string]any{"runtime": "test"}})
		sid, run := str(started, "session", "id"), str(started, "run", "id")
		other := author.must("session_start", map[string]any{"repo": "acme/widgets", "role": "author", "issue": 13, "agent": map[string]any{}})
		author.must("session_start", map[string]any{"repo": "acme/gadgets", "role": "author", "issue": 12, "agent": map[string]any{}})

		mine := author.must("session_find", map[string]any{"repo": "acme/widgets", "issue": 12})
		items, _ := get(mine, "items").([]any)
		if len(items) != 1 || str(items[0], "id") != sid || str(items[0], "run_id") != run || str(items[0], "role") != "author" ||
			get(items[0], "issue") != 12.0 || str(items[0], "branch") != "fix-12" || str(items[0], "state") != "active" {
			t.Fatalf("the restarted agent's find: %v", mine)
		}
		if _, te := author.call("session_find", map[string]any{"issue": 12}); te == nil || te.Code != "invalid_request" ||
			!strings.Contains(te.Detail, "repo") {
			t.Errorf("issue without repo: %+v", te)
		}

		handoff := checkpoint(run, 1, "review_requested")
		handoff["blocker"] = map[string]any{"kind": "waiting_review", "summary": "ready for review", "waiting_on": "reviewer"}
		author.must("checkpoint_write", map[string]any{"session_id": sid, "checkpoint": handoff})

		reviewer := newCaller(t, d.connect(t, d.token(checkpointd.RoleAgent, "acme/*"), nil))
		waiting := reviewer.must("session_find", map[string]any{"waiting_on": "reviewer"})
		items, _ = get(waiting, "items").([]any)
		if len(items) != 1 || str(items[0], "id") != sid || str(items[0], "stage") != "review_requested" || str(items[0], "run_id") != run {
			t.Fatalf("what waits on a reviewer: %v", waiting)
		}
		claim := func() *toolError {
			_, te := reviewer.call("session_resume", map[string]any{"session_id": sid, "takeover": true, "if_run": str(items[0], "run_id"),
				"reason": "review", "agent": map[string]any{"runtime": "test"}})
			return te
		}
		results := make(chan *toolError, 2)
		for range 2 {
			go func() { results <- claim() }()
		}
		var wins, changed int
		for range 2 {
			switch te := <-results; {
			case te == nil:
				wins++
			case te.Code == "run_changed":
				changed++
			default:
				t.Errorf("a claim: %+v", te)
			}
		}
		if wins != 1 || changed != 1 {
			t.Fatalf("two reviewers claim one handoff: %d won, %d run_changed; want 1 and 1", wins, changed)
		}
		// An ended session is found only when asked for.
		author.must("session_end", map[string]any{"session_id": str(other, "session", "id"), "run_id": str(other, "run", "id"),
			"outcome": "abandoned", "reason": "a duplicate"})
		for state, want := range map[string]int{"": 0, "ended": 1, "any": 1} {
			args := map[string]any{"repo": "acme/widgets", "issue": 13}
			if state != "" {
				args["state"] = state
			}
			if got, _ := get(author.must("session_find", args), "items").([]any); len(got) != want {
				t.Errorf("state %q: %d sessions, want %d", state, len(got), want)
			}
		}
	})
}
