package api_test

import (
	"github.com/checkpointd/checkpointd/redact"

	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/api"
	"github.com/checkpointd/checkpointd/errlog"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
	"github.com/checkpointd/checkpointd/webhook"
)

// These tests plant the redaction corpus (redact/testdata) in every
// free-text position the API accepts and then look for it where it must
// never be: response bodies, the daemon log, and the raw bytes of the
// database: secrets are redacted before anything is written, and
// free text is sealed at rest.

// corpusEntry is one line of secrets.txt: a fake secret planted in its context.
type corpusEntry struct {
	line   int
	kind   string
	secret string
	text   string
}

// corpusFile returns the entries of a corpus file with their line numbers.
func corpusFile(t *testing.T, name string) (lines []string, numbers []int) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "redact", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(string(raw), "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		lines, numbers = append(lines, l), append(numbers, i+1)
	}
	return lines, numbers
}

// unescapeCorpus undoes the corpus escapes: \n, \t and \\.
func unescapeCorpus(s string) string {
	return strings.NewReplacer(`\\`, `\`, `\n`, "\n", `\t`, "\t").Replace(s)
}

func secretCorpus(t *testing.T) []corpusEntry {
	t.Helper()
	lines, numbers := corpusFile(t, "secrets.txt")
	var out []corpusEntry
	for i, l := range lines {
		f := strings.Split(l, "\t")
		if len(f) != 3 || !strings.Contains(f[2], "{}") {
			t.Fatalf("secrets.txt:%d: want kind<TAB>secret<TAB>context with {}", numbers[i])
		}
		secret := unescapeCorpus(f[1])
		out = append(out, corpusEntry{line: numbers[i], kind: f[0], secret: secret,
			text: strings.Replace(unescapeCorpus(f[2]), "{}", secret, 1)})
	}
	if len(out) < 50 {
		t.Fatalf("secrets.txt has %d secrets, want at least 50", len(out))
	}
	return out
}

func lookalikeCorpus(t *testing.T) []string {
	t.Helper()
	lines, _ := corpusFile(t, "lookalikes.txt")
	for i := range lines {
		lines[i] = unescapeCorpus(lines[i])
	}
	if len(lines) < 30 {
		t.Fatalf("lookalikes.txt has %d entries, want at least 30", len(lines))
	}
	return lines
}

// A slot is one free-text position of a write request: a checkpoint
// document ("doc"), a session creation ("session") or a takeover ("run").
// path locates it in the request body, answer in the write's response,
// read (session and run slots) in GET /v1/sessions/{id} right after the write.
type slot struct {
	name   string
	where  string
	path   []any
	answer []any
	read   []any
	max    int  // bytes the schema or the request validation allows
	lines  bool // the field accepts control characters (newlines, tabs)
}

func docSlot(name string, max int, lines bool, path ...any) slot {
	return slot{name: name, where: "doc", path: path, answer: append([]any{"checkpoint"}, path...), max: max, lines: lines}
}

// plantSlots are every free-text field of schema v1 (docs/schema/checkpoint.v1.json:
// "text" 65536, "summary" 4096, "line" fields without control characters),
// the free-text metadata of a new session, and a takeover. The identifying
// fields (branch, worktree, repo) are refused instead when they look like
// a secret: TestIdentifiersThatLookLikeSecretsRefused.
var plantSlots = []slot{
	docSlot("note", 65536, true, "note"),
	docSlot("evidence[0].summary", 4096, true, "evidence", 0, "summary"),
	docSlot("evidence[0].ref", 2048, false, "evidence", 0, "ref"),
	docSlot("evidence[1].summary", 4096, true, "evidence", 1, "summary"),
	docSlot("evidence[1].ref", 2048, false, "evidence", 1, "ref"),
	docSlot("recovery.instructions", 65536, true, "recovery", "instructions"),
	docSlot("recovery.commands[0]", 4096, true, "recovery", "commands", 0),
	docSlot("recovery.commands[1]", 4096, true, "recovery", "commands", 1),
	docSlot("blocker.summary", 4096, true, "blocker", "summary"),
	docSlot("pending_operation.summary", 4096, true, "pending_operation", "summary"),
	docSlot("pending_mutation.summary", 4096, true, "pending_mutation", "summary"),
	docSlot("next_action.prompt", 65536, true, "next_action", "prompt"),
	docSlot("last_completed_action.summary", 4096, true, "last_completed_action", "summary"),
	docSlot("identity.instance", 128, false, "identity", "instance"),
	docSlot("workspace.base", 255, false, "workspace", "base"),
	{name: "session agent.instance", where: "session", path: []any{"agent", "instance"},
		answer: []any{"run", "agent", "instance"}, read: []any{"session", "current_run", "agent", "instance"}, max: checkpointd.MaxNameLength},
	{name: "session agent.model", where: "session", path: []any{"agent", "model"},
		answer: []any{"run", "agent", "model"}, read: []any{"session", "current_run", "agent", "model"}, max: checkpointd.MaxNameLength},
	{name: "session agent.provider", where: "session", path: []any{"agent", "provider"},
		answer: []any{"run", "agent", "provider"}, read: []any{"session", "current_run", "agent", "provider"}, max: checkpointd.MaxNameLength},
	{name: "session agent.runtime_version", where: "session", path: []any{"agent", "runtime_version"},
		answer: []any{"run", "agent", "runtime_version"}, read: []any{"session", "current_run", "agent", "runtime_version"}, max: checkpointd.MaxNameLength},
	{name: "session capabilities[0]", where: "session", path: []any{"capabilities", 0},
		answer: []any{"session", "capabilities", 0}, read: []any{"session", "capabilities", 0}, max: checkpointd.MaxNameLength},
	{name: "takeover reason", where: "run", path: []any{"reason"},
		answer: []any{"run", "takeover_reason"}, read: []any{"session", "current_run", "takeover_reason"}, max: checkpointd.MaxReasonLength, lines: true},
	{name: "takeover agent.instance", where: "run", path: []any{"agent", "instance"},
		answer: []any{"run", "agent", "instance"}, read: []any{"session", "current_run", "agent", "instance"}, max: checkpointd.MaxNameLength},
}

func (s slot) accepts(text string) bool {
	if len(text) > s.max {
		return false
	}
	return s.lines || !strings.ContainsFunc(text, func(r rune) bool { return r < 0x20 || r == 0x7f })
}

// spread assigns every text to an accepting slot, the least used one
// first, and returns rounds: in each, slot index → text index. Every slot
// must get at least one text.
func spread(t *testing.T, texts []string) []map[int]int {
	t.Helper()
	used := make([]int, len(plantSlots))
	var rounds []map[int]int
	for i, text := range texts {
		best := -1
		for k := range plantSlots {
			j := (i + k) % len(plantSlots)
			if plantSlots[j].accepts(text) && (best < 0 || used[j] < used[best]) {
				best = j
			}
		}
		if best < 0 {
			t.Fatalf("%.60q fits no slot", text)
		}
		if used[best] == len(rounds) {
			rounds = append(rounds, map[int]int{})
		}
		rounds[used[best]][best] = i
		used[best]++
	}
	for j, n := range used {
		if n == 0 {
			t.Fatalf("no text planted in %s", plantSlots[j].name)
		}
	}
	return rounds
}

// Request skeletons whose free-text positions hold harmless filler.
func plantedDoc(run string, tok int64, head string) map[string]any {
	return map[string]any{
		"schema_version": 1, "run_id": run, "fencing_token": tok, "role": "author", "stage": "implementing",
		"identity":  map[string]any{"runtime": "claude-code", "instance": "host-7/pid-4411"},
		"target":    map[string]any{"repo": "acme/widgets", "issue": 12},
		"workspace": map[string]any{"worktree": "/srv/agents/w1", "branch": "fix-12", "head": head, "base": "main"},
		"last_completed_action": map[string]any{"kind": "git.commit", "summary": "committed the fix",
			"at": "2026-03-01T12:00:00Z"},
		"pending_operation": map[string]any{"kind": "tests.run", "summary": "running the tests",
			"started_at": "2026-03-01T12:01:00Z"},
		"pending_mutation": map[string]any{"kind": "gitea.pr.comment", "target": "acme/widgets!34",
			"idempotency_key": "pm-34-comment-1", "summary": "reply to the review"},
		"evidence": []any{
			map[string]any{"kind": "test_run", "ref": "https://ci.example.com/builds/881", "summary": "tests passed"},
			map[string]any{"kind": "git.commit", "ref": head, "summary": "the fix"},
		},
		"blocker":     map[string]any{"kind": "waiting_review", "summary": "waiting for a review", "waiting_on": "reviewer"},
		"next_action": map[string]any{"actor": "author", "action": "reply to the review", "prompt": "resume the review reply"},
		"recovery":    map[string]any{"instructions": "fetch and reset to head", "commands": []any{"git fetch origin", "go test ./..."}},
		"note":        "nothing to add",
	}
}

func plantedSession() map[string]any {
	return map[string]any{"repo": "acme/widgets", "role": "author", "issue": 12, "branch": "fix-12",
		"agent":    map[string]any{"runtime": "claude-code", "provider": "anthropic", "instance": "host-7/pid-1"},
		"worktree": "/srv/agents/w1", "capabilities": []any{"git.push", "pr.create"}}
}

func plantedTakeover() map[string]any {
	return map[string]any{"takeover": true, "reason": "agent restarted",
		"agent": map[string]any{"runtime": "claude-code", "instance": "host-8/pid-2"}}
}

func setPath(v any, path []any, s string) {
	for i, p := range path {
		last := i == len(path)-1
		switch p := p.(type) {
		case string:
			if last {
				v.(map[string]any)[p] = s
			} else {
				v = v.(map[string]any)[p]
			}
		case int:
			if last {
				v.([]any)[p] = s
			} else {
				v = v.([]any)[p]
			}
		}
	}
}

func getPath(v any, path []any) string {
	for _, p := range path {
		switch p := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[p]
		case int:
			a, _ := v.([]any)
			if p >= len(a) {
				return "<missing>"
			}
			v = a[p]
		}
	}
	s, ok := v.(string)
	if !ok {
		return fmt.Sprintf("<not a string: %v>", v)
	}
	return s
}

// syncBuffer is the daemon log: handlers may log from any goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b.Reset()
}

func (b *syncBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.b.Bytes())
}

// loggedHarness is a harness whose store and handler log JSON at debug
// level into logs, with the default document limit (256 KiB).
func loggedHarness(t *testing.T, b storetest.Backend) (h *harness, logs *syncBuffer, url string) {
	t.Helper()
	url = storetest.URL(t, b)
	logs = &syncBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s, err := store.Open(context.Background(), store.Config{URL: url, Clock: checkpointd.SystemClock{}, Logger: logger, Keys: storetest.Keys})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.Migrate(t.Context()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	h = &harness{t: t, store: s}
	h.handler = api.New(api.Deps{Store: api.StoresOf(s), Workflow: checkpointd.DefaultWorkflow(), DigestKey: testDigestKey, Logger: logger})
	h.operator = h.token(checkpointd.RoleOperator, nil)
	h.agent = h.token(checkpointd.RoleAgent, []string{"acme/*"})
	h.reader = h.token(checkpointd.RoleReader, []string{"acme/widgets"})
	return h, logs, url
}

// transcript sends requests through a harness and keeps every request and
// response body, so the test can search all of them afterwards.
type transcript struct {
	h        *harness
	sent     [][]byte
	received []exchange
}

type exchange struct {
	label string
	raw   []byte // body and headers
}

func (tr *transcript) do(method, path, token string, body any) response {
	tr.h.t.Helper()
	return tr.keep(method, path, body, tr.h.do(method, path, token, body))
}

func (tr *transcript) doKey(method, path, token, key string, body any) response {
	tr.h.t.Helper()
	return tr.keep(method, path, body, tr.h.doKey(method, path, token, key, body))
}

func (tr *transcript) keep(method, path string, body any, r response) response {
	switch b := body.(type) {
	case nil:
	case string:
		tr.sent = append(tr.sent, []byte(b))
	default:
		j, _ := json.Marshal(b)
		tr.sent = append(tr.sent, j)
	}
	raw := append(bytes.Clone(r.raw), fmt.Sprint(r.header)...)
	tr.received = append(tr.received, exchange{label: fmt.Sprintf("%s %s (%d)", method, path, r.status), raw: raw})
	return r
}

// A needle is one secret in every form it could be stored in: as is, JSON-
// escaped, and, for a secret with separators (a PEM block), each long run
// of token characters, which survives any quoting (a PostgreSQL row
// literal doubles backslashes and quotes).
type needle struct {
	name  string
	forms [][]byte
}

func needleFor(name, secret string) needle {
	n := needle{name: name, forms: [][]byte{[]byte(secret)}}
	var esc bytes.Buffer
	enc := json.NewEncoder(&esc)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(secret)
	if e := strings.TrimSuffix(esc.String(), "\n"); e[1:len(e)-1] != secret {
		n.forms = append(n.forms, []byte(e[1:len(e)-1]))
	}
	for _, f := range strings.FieldsFunc(secret, func(r rune) bool {
		return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune("+/=_.-", r))
	}) {
		if len(f) >= 16 && f != secret {
			n.forms = append(n.forms, []byte(f))
		}
	}
	return n
}

func secretNeedles(entries []corpusEntry) []needle {
	out := make([]needle, len(entries))
	for i, e := range entries {
		out[i] = needleFor(fmt.Sprintf("secrets.txt:%d (%s)", e.line, e.kind), e.secret)
	}
	return out
}

// found returns the needles that occur in hay.
func found(hay []byte, needles []needle) []string {
	var out []string
	for _, n := range needles {
		for _, f := range n.forms {
			if bytes.Contains(hay, f) {
				out = append(out, n.name)
				break
			}
		}
	}
	return out
}

// rawDatabase returns what the database holds, as bytes: for SQLite the
// database file with its -wal and -shm files, for PostgreSQL every row of
// every table of the test's schema as text.
func rawDatabase(t *testing.T, b storetest.Backend, url string) []byte {
	t.Helper()
	if b == storetest.SQLite {
		var all []byte
		for _, suffix := range []string{"", "-wal", "-shm"} {
			data, err := os.ReadFile(url + suffix)
			if err != nil && !(suffix != "" && os.IsNotExist(err)) {
				t.Fatal(err)
			}
			all = append(all, data...)
		}
		return all
	}
	db, err := sql.Open("postgres", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var schema string
	if err := db.QueryRow(`SELECT current_schema()`).Scan(&schema); err != nil || !strings.HasPrefix(schema, "t_") {
		t.Fatalf("dumping schema %q (%v): not the test's own schema", schema, err)
	}
	rows, err := db.Query(`SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY table_name`)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, name)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	var all bytes.Buffer
	for _, table := range tables {
		rows, err := db.Query(fmt.Sprintf(`SELECT t::text FROM %q t`, table))
		if err != nil {
			t.Fatalf("dump %s: %v", table, err)
		}
		for rows.Next() {
			var row string
			if err := rows.Scan(&row); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&all, "%s: %s\n", table, row)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
	}
	if !bytes.Contains(all.Bytes(), []byte("checkpoints: (")) {
		t.Fatalf("the dump of %s has no checkpoint rows: tables %v", schema, tables)
	}
	return all.Bytes()
}

// rawSQL opens a second connection to the test database, for what the API
// must never be able to do: read and write rows behind its back.
func rawSQL(t *testing.T, b storetest.Backend, url string) (db *sql.DB, rebind func(string) string) {
	t.Helper()
	var err error
	rebind = func(q string) string { return q }
	if b == storetest.SQLite {
		db, err = sql.Open("sqlite", "file:"+url+"?_pragma=busy_timeout(5000)")
	} else {
		db, err = sql.Open("postgres", url)
		rebind = func(q string) string {
			for i := 1; strings.Contains(q, "?"); i++ {
				q = strings.Replace(q, "?", fmt.Sprintf("$%d", i), 1)
			}
			return q
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, rebind
}

const (
	headA = "9fceb02d0ae598e95dc970b74767f19372d61af8"
	headB = "b1946ac92492d2347c6235b4d2611184b1946ac92492d2347c6235b4d2611184"
)

// TestSecretsNeverLeave plants every corpus secret, in its context, in
// every free-text position of checkpoints, sessions and takeovers written
// through the API, and then asserts that no secret appears in any response,
// in the log, or in the raw database, while the positions hold exactly what
// RedactString makes of the text.
func TestSecretsNeverLeave(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h, logs, url := loggedHarness(t, b)
		tr := &transcript{h: h}
		corpus := secretCorpus(t)
		texts := make([]string, len(corpus))
		for i, e := range corpus {
			texts[i] = e.text
		}
		rounds := spread(t, texts)

		// check asserts that one planted position came back redacted.
		check := func(where string, got string, e corpusEntry) {
			t.Helper()
			want, _, _ := redact.String(e.text)
			if got != want || !strings.Contains(got, "[REDACTED:"+e.kind+"]") || strings.Contains(got, e.secret) {
				t.Errorf("secrets.txt:%d at %s:\n got %q\nwant %q", e.line, where, got, want)
			}
		}
		var sessions []string
		for r, round := range rounds {
			sess, takeover := plantedSession(), plantedTakeover()
			head := []string{headA, headB}[r%2]
			bodies := map[string]map[string]any{"session": sess, "run": takeover}
			for j, i := range round {
				if s := plantSlots[j]; s.where != "doc" {
					setPath(bodies[s.where], s.path, corpus[i].text)
				}
			}
			created := tr.doKey("POST", "/v1/sessions", h.agent, fmt.Sprintf("session-%d", r), sess).expect(t, 201, "")
			tr.doKey("POST", "/v1/sessions", h.agent, fmt.Sprintf("session-%d", r), sess).expect(t, 200, "")
			id := created.str("session", "id")
			sessions = append(sessions, id)
			path := "/v1/sessions/" + id
			afterCreate := tr.do("GET", path, h.reader, nil).expect(t, 200, "")
			run := tr.do("POST", path+"/runs", h.agent, takeover).expect(t, 201, "")
			afterTakeover := tr.do("GET", path, h.reader, nil).expect(t, 200, "")

			doc := plantedDoc(run.str("run", "id"), run.num("run", "fencing_token"), head)
			planted := 0
			for j, i := range round {
				if s := plantSlots[j]; s.where == "doc" {
					setPath(doc, s.path, corpus[i].text)
					planted++
				}
			}
			written := tr.doKey("POST", path+"/checkpoints", h.agent, fmt.Sprintf("checkpoint-%d", r), doc).expect(t, 201, "")
			replayed := tr.doKey("POST", path+"/checkpoints", h.agent, fmt.Sprintf("checkpoint-%d", r), doc).expect(t, 200, "")
			if !bytes.Equal(replayed.raw, written.raw) {
				t.Errorf("round %d: the replay differs from the write", r)
			}
			if n := written.num("checkpoint", "redactions"); n != int64(planted) {
				t.Errorf("round %d: redactions %d, want %d (one per planted secret)", r, n, planted)
			}
			bySeq := tr.do("GET", path+"/checkpoints/1", h.reader, nil).expect(t, 200, "")
			latest := tr.do("GET", path+"/checkpoints/latest", h.reader, nil).expect(t, 200, "")
			resume := tr.do("GET", path+"/resume", h.agent, nil).expect(t, 200, "")
			for j, i := range round {
				s := plantSlots[j]
				switch s.where {
				case "doc":
					check(s.name+" (write)", getPath(written.body, s.answer), corpus[i])
					check(s.name+" (GET seq)", getPath(bySeq.body, s.answer), corpus[i])
					check(s.name+" (GET latest)", getPath(latest.body, s.answer), corpus[i])
					check(s.name+" (resume)", getPath(resume.body, s.answer), corpus[i])
				case "session":
					check(s.name+" (create)", getPath(created.body, s.answer), corpus[i])
					check(s.name+" (GET session)", getPath(afterCreate.body, s.read), corpus[i])
				case "run":
					check(s.name+" (takeover)", getPath(run.body, s.answer), corpus[i])
					check(s.name+" (GET session)", getPath(afterTakeover.body, s.read), corpus[i])
				}
			}
			for _, resp := range []response{written, bySeq, latest} {
				if got := getPath(resp.body, []any{"checkpoint", "workspace", "head"}); got != head {
					t.Errorf("round %d: workspace.head %q, want %q", r, got, head)
				}
			}
			tr.do("GET", path, h.reader, nil).expect(t, 200, "")
			tr.do("GET", path+"/checkpoints", h.reader, nil).expect(t, 200, "")
			tr.do("GET", path+"/events", h.reader, nil).expect(t, 200, "")
		}
		tr.do("GET", "/v1/sessions?limit=500", h.operator, nil).expect(t, 200, "")
		tr.do("GET", "/v1/sessions?limit=500", h.reader, nil).expect(t, 200, "")

		// Rejected requests that carry secrets: problem details must not
		// echo them.
		id := sessions[0]
		path := "/v1/sessions/" + id
		cur := tr.do("GET", path, h.reader, nil).expect(t, 200, "")
		run, tok := cur.str("session", "current_run", "id"), cur.num("session", "current_run", "fencing_token")
		pem := corpus[0]
		for _, e := range corpus {
			if e.kind == "pem_private_key" {
				pem = e
				break
			}
		}
		ghp := "ghp_9XmjgiUy3eB9urqHKOQXJCj0i12B1tjYeNth" // github_token of secrets.txt
		var huge []string
		for _, e := range corpus {
			huge = append(huge, e.text)
		}
		bad := func(mutate func(d map[string]any)) map[string]any {
			d := plantedDoc(run, tok, headA)
			mutate(d)
			return d
		}
		rejected := []struct {
			name   string
			method string
			path   string
			body   any
			status int
			code   string
		}{
			{"head holds a token", "POST", path + "/checkpoints", bad(func(d map[string]any) { d["workspace"].(map[string]any)["head"] = ghp }), 422, "invalid_checkpoint"},
			{"stage holds a token", "POST", path + "/checkpoints", bad(func(d map[string]any) { d["stage"] = ghp }), 422, "invalid_checkpoint"},
			{"evidence kind holds a token", "POST", path + "/checkpoints", bad(func(d map[string]any) { d["evidence"] = []any{map[string]any{"kind": ghp}} }), 422, "invalid_checkpoint"},
			{"multi-line runtime holds a key", "POST", path + "/checkpoints", bad(func(d map[string]any) { d["identity"].(map[string]any)["runtime"] = pem.text }), 422, "invalid_checkpoint"},
			{"fencing token is a token", "POST", path + "/checkpoints", bad(func(d map[string]any) { d["fencing_token"] = ghp }), 422, "invalid_checkpoint"},
			{"unknown field holds a token", "POST", path + "/checkpoints", bad(func(d map[string]any) { d["notes"] = "export GITHUB_TOKEN=" + ghp }), 422, "invalid_checkpoint"},
			{"note too long", "POST", path + "/checkpoints", bad(func(d map[string]any) { d["note"] = strings.Repeat(strings.Join(huge, "\n"), 10)[:70000] }), 422, "invalid_checkpoint"},
			{"run id is a token", "POST", path + "/checkpoints", bad(func(d map[string]any) { d["run_id"] = ghp }), 409, "run_superseded"},
			{"document too large", "POST", path + "/checkpoints", bad(func(d map[string]any) { d["note"] = strings.Repeat(strings.Join(huge, "\n"), 40) }), 413, "payload_too_large"},
			{"malformed document", "POST", path + "/checkpoints", `{"schema_version": 1, "note": "export GITHUB_TOKEN=` + ghp, 400, "invalid_json"},
			{"session repo is a token", "POST", "/v1/sessions", map[string]any{"repo": ghp, "role": "author"}, 422, "invalid_request"},
			{"session instance too long", "POST", "/v1/sessions", map[string]any{"repo": "acme/widgets", "role": "author",
				"agent": map[string]any{"instance": "GITHUB_TOKEN=" + ghp + strings.Repeat(" ", 200)}}, 422, "invalid_request"},
			{"takeover reason too long", "POST", path + "/runs", map[string]any{"takeover": true,
				"reason": pem.text + strings.Repeat(" ", 2000)}, 422, "invalid_request"},
			{"end outcome is a token", "POST", path + "/end", map[string]any{"run_id": run, "outcome": ghp}, 422, "invalid_request"},
		}
		for _, c := range rejected {
			r := tr.do(c.method, c.path, h.agent, c.body).expect(t, c.status, c.code)
			if leaked := found(r.raw, secretNeedles(corpus)); leaked != nil {
				t.Errorf("%s: the %d answer echoes %v: %s", c.name, c.status, leaked, r.raw)
			}
		}

		// A 5xx with secrets in the request: the store has lost its keys, so
		// it cannot seal; the answer is generic and the log has the cause.
		h.store.SetKeys(nil)
		five := tr.do("POST", path+"/checkpoints", h.agent, bad(func(d map[string]any) {
			d["note"], d["recovery"] = pem.text, map[string]any{"instructions": "export GITHUB_TOKEN=" + ghp}
		})).expect(t, 500, "internal")
		tr.doKey("POST", "/v1/sessions", h.agent, "session-without-keys", plantedSession()).expect(t, 500, "internal")
		h.store.SetKeys(storetest.Keys)
		if d := five.str("detail"); strings.Contains(d, "key") || strings.Contains(d, id) {
			t.Errorf("5xx detail is not generic: %q", d)
		}
		log := logs.Bytes()
		if !bytes.Contains(log, []byte(`"level":"ERROR"`)) || !bytes.Contains(log, []byte(`"code":"internal"`)) {
			t.Fatalf("the 5xx was not logged; the log check below would prove nothing:\n%s", log)
		}

		needles := secretNeedles(corpus)
		for _, tok := range []string{h.operator, h.agent, h.reader} {
			needles = append(needles, needleFor("an API token", tok))
		}
		// The detector finds what was sent: every secret was planted.
		var sent []byte
		for _, s := range tr.sent {
			sent = append(sent, s...)
		}
		if got := found(sent, needles[:len(corpus)]); len(got) != len(corpus) {
			t.Fatalf("only %d of %d secrets found in the requests: the search is broken", len(got), len(corpus))
		}

		for _, x := range tr.received {
			if leaked := found(x.raw, needles); leaked != nil {
				t.Errorf("response to %s holds %v", x.label, leaked)
			}
		}
		if leaked := found(log, needles); leaked != nil {
			t.Errorf("the log holds %v", leaked)
		}
		raw := rawDatabase(t, b, url)
		if !bytes.Contains(raw, []byte(headA)) || !bytes.Contains(raw, []byte("[REDACTED:")) {
			t.Fatalf("the raw database lacks the clear head or a redaction marker: the search is blind")
		}
		if leaked := found(raw, needles); leaked != nil {
			t.Errorf("the raw database (open) holds %v", leaked)
		}
		if b == storetest.SQLite {
			// Closing checkpoints the WAL into the database file.
			if err := h.store.Close(); err != nil {
				t.Fatal(err)
			}
			raw := rawDatabase(t, b, url)
			if !bytes.Contains(raw, []byte(headA)) {
				t.Fatalf("the closed database file lacks the clear head: the search is blind")
			}
			if leaked := found(raw, needles); leaked != nil {
				t.Errorf("the raw database (closed) holds %v", leaked)
			}
		}
		t.Logf("%d secrets in %d rounds over %d positions, %d responses searched", len(corpus), len(rounds), len(plantSlots), len(tr.received))
	})
}

// TestProblemDetailsDoNotEchoSecrets sends request fields the API checks
// but does not redact before it rejects them: a 4xx answer goes back over
// the wire and into client logs, so it must not repeat a secret either.
// Every secret of the corpus that redaction recognises on its own (a
// prefixed token, not one that needs its context) is planted where a
// problem detail would quote it: a lowercase token-shaped stage or role
// (they pass the name pattern and are quoted as "not configured"), the
// name of an unknown field, a repo and branch the server compares. The
// answer may say what was wrong, redacted, never the secret.
func TestProblemDetailsDoNotEchoSecrets(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newHarness(t, b)
		id, run, tok := h.newSession()
		const ghp = "ghp_9XmjgiUy3eB9urqHKOQXJCj0i12B1tjYeNth" // github_token of secrets.txt
		type echoCase struct {
			name   string
			method string
			path   string
			body   any
			status int
			code   string
			secret string
		}
		cases := []echoCase{
			{"session role", "POST", "/v1/sessions", map[string]any{"repo": "acme/widgets", "role": ghp}, 422, "invalid_request", ghp},
			{"end run_id", "POST", "/v1/sessions/" + id + "/end", map[string]any{"run_id": ghp, "outcome": "completed"}, 409, "run_superseded", ghp},
		}
		cpPath := "/v1/sessions/" + id + "/checkpoints"
		names := []string{ // token shapes that are also lowercase names
			"ghp_9xmjgiuy3eb9urqhkoqxjcj0i12b1tjyenth", "sk-proj-abcdefghij0123456789klmnopqrst",
			"glpat-abcdefghij0123456789", "xoxb-123456789012-abcdefghijkl",
		}
		for _, n := range names {
			if red, _, _ := redact.String(n); red == n {
				t.Fatalf("%s is not redacted: the case proves nothing", n)
			}
			cases = append(cases,
				echoCase{"stage " + n, "POST", cpPath, checkpointDoc(run, tok, func(d map[string]any) { d["stage"] = n }), 422, "invalid_checkpoint", n},
				echoCase{"checkpoint role " + n, "POST", cpPath, checkpointDoc(run, tok, func(d map[string]any) { d["role"] = n }), 422, "invalid_checkpoint", n},
				echoCase{"session role " + n, "POST", "/v1/sessions", map[string]any{"repo": "acme/widgets", "role": n}, 422, "invalid_request", n})
		}
		for _, e := range secretCorpus(t) {
			if red, _, _ := redact.String(e.secret); red == e.secret {
				continue // recognised only in its context: nothing in a detail could tell
			}
			field := fmt.Sprintf("secrets.txt:%d", e.line)
			cases = append(cases,
				echoCase{"unknown session field " + field, "POST", "/v1/sessions", map[string]any{"repo": "acme/widgets", "role": "author", e.secret: 1}, 422, "invalid_request", e.secret},
				echoCase{"unknown checkpoint field " + field, "POST", cpPath, checkpointDoc(run, tok, func(d map[string]any) { d[e.secret] = 1 }), 422, "invalid_checkpoint", e.secret},
				echoCase{"unknown lease field " + field, "POST", "/v1/leases", map[string]any{"resource": issue(1), "session_id": id, "run_id": run, "ttl_seconds": 60, e.secret: 1}, 422, "invalid_request", e.secret},
				echoCase{"unknown run field " + field, "POST", "/v1/sessions/" + id + "/runs", map[string]any{"takeover": true, e.secret: 1}, 422, "invalid_request", e.secret})
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				r := h.do(c.method, c.path, h.agent, c.body).expect(t, c.status, c.code)
				if leaked := found(r.raw, []needle{needleFor("the secret", c.secret)}); leaked != nil {
					t.Errorf("the %d answer echoes the secret: %s", c.status, r.raw)
				}
			})
		}
		t.Logf("%d requests", len(cases))
	})
}

// TestLookalikesSurvive plants every look-alike the same way: each comes
// back byte for byte, and documents holding only look-alikes report no
// redaction. workspace.head is a SHA, in one round the shape of a Gitea
// token, and must survive exactly.
func TestLookalikesSurvive(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newHarness(t, b)
		h.handler = api.New(api.Deps{Store: api.StoresOf(h.store), Workflow: checkpointd.DefaultWorkflow(), DigestKey: testDigestKey})
		looks := lookalikeCorpus(t)
		rounds := spread(t, looks)
		heads := []string{
			"a4c123b1612dd272d1371c17149d439536b3216f",
			"dba41ecccc3fc1626e53a13043b026c48bbf33feff9243a8f506b40928b5b7a7",
			"4ddbc9835d24cea12f9116397a916402447c3ca8", // a Gitea token of secrets.txt, here in a SHA slot
			"0123456789ABCDEF0123456789ABCDEF01234567",
		}
		for r, round := range rounds {
			sess, takeover := plantedSession(), plantedTakeover()
			bodies := map[string]map[string]any{"session": sess, "run": takeover}
			for j, i := range round {
				if s := plantSlots[j]; s.where != "doc" {
					setPath(bodies[s.where], s.path, looks[i])
				}
			}
			created := h.do("POST", "/v1/sessions", h.agent, sess).expect(t, 201, "")
			path := "/v1/sessions/" + created.str("session", "id")
			afterCreate := h.do("GET", path, h.reader, nil).expect(t, 200, "")
			run := h.do("POST", path+"/runs", h.agent, takeover).expect(t, 201, "")
			afterTakeover := h.do("GET", path, h.reader, nil).expect(t, 200, "")
			head := heads[r%len(heads)]
			doc := plantedDoc(run.str("run", "id"), run.num("run", "fencing_token"), head)
			for j, i := range round {
				if s := plantSlots[j]; s.where == "doc" {
					setPath(doc, s.path, looks[i])
				}
			}
			written := h.do("POST", path+"/checkpoints", h.agent, doc).expect(t, 201, "")
			if n := written.num("checkpoint", "redactions"); n != 0 {
				t.Errorf("round %d: %d redactions in a document of look-alikes", r, n)
			}
			bySeq := h.do("GET", path+"/checkpoints/1", h.reader, nil).expect(t, 200, "")
			latest := h.do("GET", path+"/checkpoints/latest", h.reader, nil).expect(t, 200, "")
			if n := latest.num("checkpoint", "redactions"); n != 0 {
				t.Errorf("round %d: GET reports %d redactions", r, n)
			}
			session := h.do("GET", path, h.reader, nil).expect(t, 200, "")
			for j, i := range round {
				s := plantSlots[j]
				got := map[string]string{}
				switch s.where {
				case "doc":
					got["GET seq"], got["GET latest"] = getPath(bySeq.body, s.answer), getPath(latest.body, s.answer)
				case "session":
					got["create"], got["GET session"] = getPath(created.body, s.answer), getPath(afterCreate.body, s.read)
				case "run":
					got["takeover"], got["GET session"] = getPath(run.body, s.answer), getPath(afterTakeover.body, s.read)
				}
				for via, g := range got {
					if g != looks[i] {
						t.Errorf("look-alike at %s (%s) changed:\n got %q\nwant %q", s.name, via, g, looks[i])
					}
				}
			}
			if got := getPath(latest.body, []any{"checkpoint", "workspace", "head"}); got != head {
				t.Errorf("workspace.head %q, want %q", got, head)
			}
			if got := session.str("session", "latest_checkpoint", "head"); !strings.EqualFold(got, head) {
				t.Errorf("session's latest head %q, want %q", got, head)
			}
		}
		t.Logf("%d look-alikes in %d rounds", len(looks), len(rounds))
	})
}

const sealMarker = "zebra-quartz-marker-7781"

// sealedDoc puts the marker in every sealed free-text field.
func sealedDoc(run string, tok int64, stage, head string) map[string]any {
	return checkpointDoc(run, tok, func(d map[string]any) {
		d["stage"] = stage
		d["workspace"].(map[string]any)["head"] = head
		d["note"] = "note " + sealMarker
		d["recovery"] = map[string]any{"instructions": "instructions " + sealMarker, "commands": []any{"echo " + sealMarker}}
		d["evidence"] = []any{map[string]any{"kind": "test_run", "ref": "ref-" + sealMarker, "summary": "evidence " + sealMarker}}
		d["next_action"] = map[string]any{"actor": "author", "action": "reply", "prompt": "prompt " + sealMarker}
		d["blocker"] = map[string]any{"kind": "waiting_review", "summary": "blocker " + sealMarker}
		d["pending_operation"] = map[string]any{"kind": "tests.run", "summary": "operation " + sealMarker}
		d["pending_mutation"] = map[string]any{"kind": "gitea.pr.comment", "idempotency_key": "k1", "summary": "mutation " + sealMarker}
	})
}

// TestFreeTextSealedAtRest: the free-text fields are not in the database in
// the clear, yet come back through the API; the queryable fields stay in
// the clear.
func TestFreeTextSealedAtRest(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h, logs, url := loggedHarness(t, b)
		id, run, tok := h.newSession()
		path := "/v1/sessions/" + id
		const stage, head = "review_requested", "c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00"
		h.doKey("POST", path+"/checkpoints", h.agent, "sealed-1", sealedDoc(run, tok, stage, head)).expect(t, 201, "")
		h.doKey("POST", path+"/checkpoints", h.agent, "sealed-1", sealedDoc(run, tok, stage, head)).expect(t, 200, "")

		latest := h.do("GET", path+"/checkpoints/latest", h.reader, nil).expect(t, 200, "")
		for _, p := range [][]any{
			{"note"}, {"recovery", "instructions"}, {"recovery", "commands", 0}, {"evidence", 0, "summary"},
			{"evidence", 0, "ref"}, {"next_action", "prompt"}, {"blocker", "summary"},
			{"pending_operation", "summary"}, {"pending_mutation", "summary"},
		} {
			if got := getPath(latest.body, append([]any{"checkpoint"}, p...)); !strings.HasSuffix(got, sealMarker) {
				t.Errorf("%v = %q, want it to end in the marker", p, got)
			}
		}
		if latest.str("checkpoint", "stage") != stage || latest.str("checkpoint", "next_action", "action") != "reply" {
			t.Errorf("clear fields: %s", latest.raw)
		}

		marker := []needle{needleFor("the marker", sealMarker)}
		raw := rawDatabase(t, b, url)
		if !bytes.Contains(raw, []byte(head)) || !bytes.Contains(raw, []byte(stage)) {
			t.Fatalf("stage %s and head %s are not in the database in the clear", stage, head)
		}
		if found(raw, marker) != nil {
			t.Errorf("the marker is in the raw database in the clear")
		}
		if found(logs.Bytes(), marker) != nil {
			t.Errorf("the marker is in the log")
		}
		if b == storetest.SQLite {
			if err := h.store.Close(); err != nil {
				t.Fatal(err)
			}
			raw := rawDatabase(t, b, url)
			if !bytes.Contains(raw, []byte(head)) {
				t.Fatalf("the closed database file lacks the clear head: the search is blind")
			}
			if found(raw, marker) != nil {
				t.Errorf("the marker is in the closed database file in the clear")
			}
		}
	})
}

// TestTamperedSealFailsClosed changes the sealed column behind the API's
// back: a checkpoint whose seal does not open is a 500 with a generic
// detail, never a document with missing or garbled free text.
func TestTamperedSealFailsClosed(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h, logs, url := loggedHarness(t, b)
		id, run, tok := h.newSession()
		path := "/v1/sessions/" + id
		for range 5 {
			h.do("POST", path+"/checkpoints", h.agent, sealedDoc(run, tok, "implementing", headA)).expect(t, 201, "")
		}
		db, rebind := rawSQL(t, b, url)
		sealed := func(seq int) string {
			var s string
			if err := db.QueryRow(rebind(`SELECT sealed FROM checkpoints WHERE session_id = ? AND seq = ?`), id, seq).Scan(&s); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(s, "k1:") {
				t.Fatalf("checkpoint %d is not sealed under k1: %.20q", seq, s)
			}
			return s
		}
		flip := func(s string) string {
			i := len(s) / 2
			c := byte('A')
			if s[i] == 'A' {
				c = 'B'
			}
			return s[:i] + string(c) + s[i+1:]
		}
		// Checkpoint 1 stays intact; 2–5 are tampered, 5 is the latest.
		tampered := map[int]string{
			2: flip(sealed(2)),             // a flipped ciphertext byte
			3: sealed(1),                   // another row's seal: the AAD does not match
			4: "k7:" + sealed(4)[3:],       // an unknown key id
			5: "not a sealed value at all", // garbage
		}
		for seq, v := range tampered {
			if _, err := db.Exec(rebind(`UPDATE checkpoints SET sealed = ? WHERE session_id = ? AND seq = ?`), v, id, seq); err != nil {
				t.Fatal(err)
			}
		}

		ok := h.do("GET", path+"/checkpoints/1", h.reader, nil).expect(t, 200, "")
		if !strings.HasSuffix(ok.str("checkpoint", "note"), sealMarker) {
			t.Fatalf("the intact checkpoint does not read back: %s", ok.raw)
		}
		for _, p := range []string{"/checkpoints/2", "/checkpoints/3", "/checkpoints/4", "/checkpoints/5", "/checkpoints/latest", "/resume"} {
			r := h.do("GET", path+p, h.agent, nil).expect(t, 500, "checkpoint_corrupt")
			for _, leak := range []string{"seal", "key", "authenticat", id, sealMarker} {
				if strings.Contains(strings.ToLower(string(r.raw)), strings.ToLower(leak)) {
					t.Errorf("GET %s: the 500 answer mentions %q: %s", p, leak, r.raw)
				}
			}
			if r.get("checkpoint") != nil {
				t.Errorf("GET %s: a 500 with a checkpoint: %s", p, r.raw)
			}
		}
		// Summaries need no unsealing.
		h.do("GET", path+"/checkpoints", h.reader, nil).expect(t, 200, "")
		h.do("GET", path, h.reader, nil).expect(t, 200, "")
		if n := bytes.Count(logs.Bytes(), []byte(`"msg":"request failed"`)); n != 6 {
			t.Errorf("%d failures logged, want 6 (one per 500):\n%s", n, logs.Bytes())
		}
	})
}

// TestDigestCoversSecretsStoredBodiesEqual: two documents that differ only
// in a secret digest differently (the digest is over the pre-redaction
// document) while what is stored of them is the same.
func TestDigestCoversSecretsStoredBodiesEqual(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h, _, url := loggedHarness(t, b)
		id, run, tok := h.newSession()
		path := "/v1/sessions/" + id
		withToken := func(secret string) map[string]any {
			return checkpointDoc(run, tok, func(d map[string]any) {
				d["note"] = "export GITEA_TOKEN=" + secret
				d["identity"].(map[string]any)["instance"] = "GITEA_TOKEN=" + secret
			})
		}
		// Two Gitea tokens of secrets.txt: 40 hex characters, like a SHA.
		a := h.doKey("POST", path+"/checkpoints", h.agent, "same-key", withToken("a573e693dcf18630bcc2a979f4ee0a27d94a1678")).expect(t, 201, "")
		h.doKey("POST", path+"/checkpoints", h.agent, "same-key", withToken("f002611a95f948980a6b2ba56f3714754c48108e")).expect(t, 422, "idempotency_conflict")
		b2 := h.do("POST", path+"/checkpoints", h.agent, withToken("f002611a95f948980a6b2ba56f3714754c48108e")).expect(t, 201, "")
		if da, db := a.str("checkpoint", "digest"), b2.str("checkpoint", "digest"); da == db || !strings.HasPrefix(da, "hmac-sha256:v1:") {
			t.Errorf("digests %q and %q: want two different HMAC digests", da, db)
		}
		if a.num("checkpoint", "redactions") != 2 || b2.num("checkpoint", "redactions") != 2 {
			t.Errorf("redactions %d and %d, want 2 each", a.num("checkpoint", "redactions"), b2.num("checkpoint", "redactions"))
		}

		// What the API returns of them differs only in what the server adds.
		doc := func(seq int) map[string]any {
			cp := h.do("GET", fmt.Sprintf("%s/checkpoints/%d", path, seq), h.reader, nil).expect(t, 200, "").get("checkpoint").(map[string]any)
			for _, k := range []string{"seq", "parent_seq", "created_at", "digest", "validity"} {
				delete(cp, k)
			}
			return cp
		}
		d1, d2 := doc(1), doc(2)
		j1, _ := json.Marshal(d1)
		j2, _ := json.Marshal(d2)
		if !bytes.Equal(j1, j2) || !strings.Contains(string(j1), "GITEA_TOKEN=[REDACTED:gitea_token]") {
			t.Errorf("the stored redacted documents differ:\n%s\n%s", j1, j2)
		}
		// And so does the clear column in the database.
		db, rebind := rawSQL(t, b, url)
		var docs []string
		rows, err := db.Query(rebind(`SELECT document FROM checkpoints WHERE session_id = ? ORDER BY seq`), id)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var d string
			if err := rows.Scan(&d); err != nil {
				t.Fatal(err)
			}
			docs = append(docs, d)
		}
		if len(docs) != 2 || docs[0] != docs[1] {
			t.Errorf("stored documents differ: %q", docs)
		}
		if !strings.Contains(docs[0], "[REDACTED:gitea_token]") {
			t.Errorf("stored document lacks the redaction marker: %s", docs[0])
		}
	})
}

// TestSecretInMemberNameNeverKept: a secret inside a member name — an
// unknown key shaped like a URL with a password, which a JSON pointer
// escapes ("//" as "~1~1") — is redacted before it is escaped: the 422's
// detail and problems, the durable error record (GET /v1/errors, the
// database's bytes) and the log never carry it.
func TestSecretInMemberNameNeverKept(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h, logs, url := loggedHarness(t, b)
		id, run, tok := h.newSession()
		h.do("POST", "/v1/sessions/"+id+"/checkpoints", h.agent, checkpointDoc(run, tok)).expect(t, 201, "")
		passwords := map[string]string{
			"https://deploy:Tr0ub4dor-and-3@git.example.com/x": "Tr0ub4dor-and-3",
			"postgres://app:c0rrect-horse-b4ttery@db/x":        "c0rrect-horse-b4ttery",
		}
		for key, pw := range passwords {
			for _, where := range []string{"top", "nested"} {
				doc := checkpointDoc(run, tok, func(d map[string]any) {
					if where == "top" {
						d[key] = 1
					} else {
						d["recovery"] = map[string]any{"instructions": "x", key: "y"}
					}
				})
				r := h.do("POST", "/v1/sessions/"+id+"/checkpoints", h.agent, doc).expect(t, 422, "invalid_checkpoint")
				if bytes.Contains(r.raw, []byte(pw)) {
					t.Errorf("%s member: the 422 echoes the password: %s", where, r.raw)
				}
				if !bytes.Contains(r.raw, []byte("REDACTED")) {
					t.Errorf("%s member: the 422 does not say where the unknown field was: %s", where, r.raw)
				}
			}
			sr := h.do("POST", "/v1/sessions", h.agent, map[string]any{"repo": "acme/widgets", "role": "author", key: 1}).expect(t, 422, "invalid_request")
			if bytes.Contains(sr.raw, []byte(pw)) {
				t.Errorf("session create: the 422 echoes the password: %s", sr.raw)
			}
		}
		errs := h.do("GET", "/v1/errors", h.operator, nil).expect(t, 200, "")
		if len(errs.get("items").([]any)) == 0 {
			t.Fatal("no durable error was recorded: the test proves nothing")
		}
		for _, pw := range passwords {
			if bytes.Contains(errs.raw, []byte(pw)) {
				t.Errorf("GET /v1/errors shows the password: %s", errs.raw)
			}
			if bytes.Contains(rawDatabase(t, b, url), []byte(pw)) {
				t.Errorf("the database holds the password")
			}
			if bytes.Contains(logs.Bytes(), []byte(pw)) {
				t.Errorf("the log holds the password")
			}
		}
	})
}

// TestSignedDeliveryKeepsNoSecretName: a signed delivery is the forge's
// word, not a trusted name. A branch that looks like a secret (no session
// can name one: the API refuses it) is not kept as a live ref, and a
// delivery id that looks like one is kept as its digest — in the
// answer, the deliveries, the durable errors, the log and the database.
func TestSignedDeliveryKeepsNoSecretName(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h, logs, url := loggedHarness(t, b)
		d := loadDelivery(t, "09-push-fast-forward.json")
		h.handler = api.New(api.Deps{Store: api.StoresOf(h.store), Workflow: checkpointd.DefaultWorkflow(), DigestKey: testDigestKey,
			Errors: errlog.New(h.store, nil, nil),
			Webhook: &webhook.Handler{Verifier: &webhook.Verifier{Secrets: [][]byte{[]byte(d.Secret)}}, Store: h.store,
				Log: slog.New(slog.NewJSONHandler(logs, nil)), Errors: errlog.New(h.store, nil, nil)}})
		id, run, tok := h.newSession()
		h.do("POST", "/v1/sessions/"+id+"/checkpoints", h.agent, checkpointDoc(run, tok)).expect(t, 201, "")

		const password = "Tr0ub4dor-and-3-horses"
		const token = "ghp_" + "aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6" // a GitHub token's shape
		body := strings.Replace(d.Body, `"ref": "refs/heads/feature/alpha"`,
			`"ref": "refs/heads/https://deploy:`+password+`@git.example.com/x"`, 1)
		if body == d.Body {
			t.Fatal("the fixture's ref was not replaced: the test proves nothing")
		}
		mac := hmac.New(sha256.New, []byte(d.Secret))
		mac.Write([]byte(body))
		sig := hex.EncodeToString(mac.Sum(nil))
		signed := func(hd http.Header) {
			for _, k := range []string{"X-Gitea-Delivery", "X-Gogs-Delivery", "X-GitHub-Delivery"} {
				hd.Set(k, token)
			}
			hd.Set("X-Gitea-Signature", sig)
			hd.Set("X-Gogs-Signature", sig)
			hd.Set("X-Hub-Signature-256", "sha256="+sig)
			hd.Del("X-Hub-Signature")
			hd.Set("Content-Length", fmt.Sprint(len(body)))
		}
		r := h.post(d, body, signed)
		if r.status != 200 || !bytes.Contains(r.raw, []byte("looks like a secret")) {
			t.Fatalf("a push to a secret-shaped branch: %d %s", r.status, r.raw)
		}
		// The same delivery id on a push that is applied, and on one whose
		// signature fails (unauthenticated, recorded as an error).
		plain := func(hd http.Header) {
			for _, k := range []string{"X-Gitea-Delivery", "X-Gogs-Delivery", "X-GitHub-Delivery"} {
				hd.Set(k, token)
			}
		}
		if r := h.post(d, d.Body, plain); r.status != 200 || !bytes.Contains(r.raw, []byte(`"delivery":"sha256:`)) {
			t.Fatalf("an applied push with a secret-shaped delivery id: %d %s", r.status, r.raw)
		}
		if r := h.post(d, d.Body+" ", plain); r.status != 401 {
			t.Fatalf("a bad signature: %d %s", r.status, r.raw)
		}
		if r := h.post(d, d.Body, plain); !bytes.Contains(r.raw, []byte(`"duplicate":true`)) {
			t.Errorf("the digest of an id still tells a redelivery: %s", r.raw)
		}
		errs := h.do("GET", "/v1/errors", h.operator, nil).expect(t, 200, "")
		if len(errs.get("items").([]any)) == 0 {
			t.Fatal("no durable error was recorded: the test proves nothing")
		}
		for name, secret := range map[string]string{"password": password, "delivery token": token} {
			if bytes.Contains(errs.raw, []byte(secret)) {
				t.Errorf("GET /v1/errors shows the %s: %s", name, errs.raw)
			}
			if bytes.Contains(rawDatabase(t, b, url), []byte(secret)) {
				t.Errorf("the database holds the %s", name)
			}
			if bytes.Contains(logs.Bytes(), []byte(secret)) {
				t.Errorf("the log holds the %s", name)
			}
		}
	})
}
