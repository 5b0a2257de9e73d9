package api_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// doKey sends a JSON request with an Idempotency-Key.
func (h *harness) doKey(method, path, token, key string, body any) response {
	h.t.Helper()
	j, _ := json.Marshal(body)
	if s, ok := body.(string); ok {
		j = []byte(s)
	}
	req := httptest.NewRequest(method, path, bytes.NewReader(j))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	rec := httptest.NewRecorder()
	h.serve(rec, req)
	r := response{status: rec.Code, header: rec.Header(), raw: rec.Body.Bytes()}
	_ = json.Unmarshal(r.raw, &r.body)
	return r
}

func TestIdempotentCheckpointWrites(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newHarness(t, b)
		id, run, tok := h.newSession()
		path := "/v1/sessions/" + id + "/checkpoints"
		withSecret := func(secret string) map[string]any {
			return checkpointDoc(run, tok, func(d map[string]any) {
				d["note"] = "pushed with GITEA_TOKEN=" + secret
			})
		}
		first := h.doKey("POST", path, h.agent, "write-1", withSecret("0123456789abcdef0123456789abcdef01234567")).expect(t, 201, "")
		if first.header.Get("Idempotent-Replayed") != "" {
			t.Error("first write marked as replayed")
		}
		// The same document again, with other whitespace and key order: a replay.
		reordered := `{"role":"author","schema_version":1,"fencing_token":` + jsonNum(tok) + `,"run_id":"` + run + `",` +
			`"stage":"implementing","identity":{"runtime":"claude-code"},"target":{"issue":12,"repo":"acme/widgets"},` +
			`"workspace":{"head":"0123456789abcdef0123456789abcdef01234567","branch":"fix-12"},` +
			`"next_action":{"actor":"author","action":"run the tests"},` +
			`"recovery":{"instructions":"git fetch && git checkout fix-12"},` +
			`"note":"pushed with GITEA_TOKEN=0123456789abcdef0123456789abcdef01234567"}`
		replay := h.doKey("POST", path, h.agent, "write-1", reordered).expect(t, 200, "")
		if replay.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(replay.raw, first.raw) {
			t.Fatalf("replay differs from the original:\n%s\n%s", first.raw, replay.raw)
		}
		// Differs only in the secret, which redaction hides: still a conflict.
		h.doKey("POST", path, h.agent, "write-1", withSecret("fedcba9876543210fedcba9876543210fedcba98")).expect(t, 422, "idempotency_conflict")
		h.doKey("POST", path, h.agent, strings.Repeat("k", 256), withSecret("x")).expect(t, 400, "invalid_idempotency_key")
		h.doKey("POST", path, h.agent, "  ", withSecret("x")).expect(t, 400, "invalid_idempotency_key")
		// A failed write releases its key: the retry runs.
		h.doKey("POST", path, h.agent, "write-2", checkpointDoc(run, tok+5)).expect(t, 409, "run_superseded")
		h.doKey("POST", path, h.agent, "write-2", checkpointDoc(run, tok)).expect(t, 201, "")

		// A key held by a request in flight.
		if _, _, err := h.store.ClaimIdempotency(t.Context(), id, "write-3", mustDigest(t, h, withSecret("a"))); err != nil {
			t.Fatal(err)
		}
		h.doKey("POST", path, h.agent, "write-3", withSecret("a")).expect(t, 409, "idempotency_in_flight")

		list := h.do("GET", path, h.reader, nil).expect(t, 200, "")
		if n := len(list.get("items").([]any)); n != 2 {
			t.Fatalf("%d checkpoints stored, want 2", n)
		}
	})
}

func TestIdempotentSessionCreation(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newHarness(t, b)
		first := h.doKey("POST", "/v1/sessions", h.agent, "create-1", sessionBody).expect(t, 201, "")
		again := h.doKey("POST", "/v1/sessions", h.agent, "create-1", sessionBody).expect(t, 200, "")
		if !bytes.Equal(first.raw, again.raw) || again.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("session replay differs:\n%s\n%s", first.raw, again.raw)
		}
		// The key names the task: a restarted agent (another instance,
		// another worktree) gets the session it created back.
		restarted := map[string]any{}
		for k, v := range sessionBody {
			restarted[k] = v
		}
		restarted["agent"] = map[string]any{"runtime": "claude-code", "instance": "host-9/pid-2"}
		restarted["worktree"] = "/w/elsewhere"
		if back := h.doKey("POST", "/v1/sessions", h.agent, "create-1", restarted).expect(t, 200, ""); !bytes.Equal(first.raw, back.raw) {
			t.Fatalf("a restarted agent's create is not the first answer:\n%s\n%s", first.raw, back.raw)
		}
		// Another role, repo or target with that key is refused, naming
		// the session the key belongs to.
		sid := first.get("session", "id").(string)
		for _, change := range []func(m map[string]any){
			func(m map[string]any) { m["role"] = "reviewer" },
			func(m map[string]any) { m["repo"] = "acme/gadgets" },
			func(m map[string]any) { m["issue"] = 99 },
			func(m map[string]any) { m["branch"] = "other-branch" },
		} {
			other := map[string]any{}
			for k, v := range sessionBody {
				other[k] = v
			}
			change(other)
			p := h.doKey("POST", "/v1/sessions", h.agent, "create-1", other).expect(t, 422, "idempotency_conflict")
			if p.get("session_id") != sid || !strings.Contains(p.get("detail").(string), sid) {
				t.Errorf("%v: the conflict does not name session %s: %s", other, sid, p.raw)
			}
		}
		// Keys are scoped to the token: another token's same key is independent.
		agent2 := h.token("agent", nil)
		h.doKey("POST", "/v1/sessions", agent2, "create-1", sessionBody).expect(t, 201, "")
		list := h.do("GET", "/v1/sessions", h.operator, nil).expect(t, 200, "")
		if n := len(list.get("items").([]any)); n != 2 {
			t.Fatalf("%d sessions, want 2", n)
		}
	})
}

func TestConcurrentIdenticalRequests(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newHarness(t, b)
		id, run, tok := h.newSession()
		path := "/v1/sessions/" + id + "/checkpoints"
		const n = 12
		statuses := make(chan int, n)
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				j, _ := json.Marshal(checkpointDoc(run, tok))
				req := httptest.NewRequest("POST", path, bytes.NewReader(j))
				req.Header.Set("Authorization", "Bearer "+h.agent)
				req.Header.Set("Idempotency-Key", "same")
				rec := httptest.NewRecorder()
				h.serve(rec, req)
				statuses <- rec.Code
			}()
		}
		wg.Wait()
		close(statuses)
		count := map[int]int{}
		for s := range statuses {
			count[s]++
		}
		if count[http.StatusCreated] != 1 || count[http.StatusOK]+count[http.StatusConflict] != n-1 {
			t.Fatalf("statuses %v: want one 201 and the rest 200 (replayed) or 409 (in flight)", count)
		}
		list := h.do("GET", path, h.reader, nil).expect(t, 200, "")
		if got := len(list.get("items").([]any)); got != 1 {
			t.Fatalf("%d checkpoints from %d identical requests, want 1", got, n)
		}
	})
}

func jsonNum(n int64) string { b, _ := json.Marshal(n); return string(b) }

// mustDigest computes the digest the server gives a document.
func mustDigest(t *testing.T, h *harness, doc map[string]any) string {
	t.Helper()
	raw, _ := json.Marshal(doc)
	p, err := checkpointd.PrepareCheckpoint(raw, checkpointd.DefaultWorkflow(), testDigestKey)
	if err != nil {
		t.Fatal(err)
	}
	return p.Digest
}
