package api_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/api"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

var testDigestKey = []byte("test-digest-key")

// harness drives the real handler over a real store.
type harness struct {
	t        *testing.T
	store    *store.Store
	handler  http.Handler
	operator string
	agent    string // scoped to acme/*
	reader   string
}

func newHarness(t *testing.T, b storetest.Backend) *harness {
	t.Helper()
	return newHarnessOn(t, storetest.Open(t, b, checkpointd.SystemClock{}))
}

// newHarnessOn is newHarness over a store the test opened itself.
func newHarnessOn(t *testing.T, s *store.Store) *harness {
	t.Helper()
	h := &harness{t: t, store: s}
	h.handler = api.New(api.Deps{Store: api.StoresOf(s), Workflow: checkpointd.DefaultWorkflow(), DigestKey: testDigestKey,
		MaxDocumentBytes: 8 << 10})
	h.operator = h.token(checkpointd.RoleOperator, nil)
	h.agent = h.token(checkpointd.RoleAgent, []string{"acme/*"})
	h.reader = h.token(checkpointd.RoleReader, []string{"acme/widgets"})
	return h
}

func (h *harness) token(role checkpointd.TokenRole, scope []string) string {
	h.t.Helper()
	secret := checkpointd.NewTokenSecret()
	if _, err := h.store.CreateToken(h.t.Context(), checkpointd.TokenSpec{Name: string(role), Role: role, Scope: scope}, checkpointd.HashToken(secret)); err != nil {
		h.t.Fatal(err)
	}
	return secret
}

type response struct {
	status int
	header http.Header
	body   map[string]any
	raw    []byte
}

func (h *harness) do(method, path, token string, body any) response {
	h.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req := httptest.NewRequest(method, path, rd)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	h.serve(rec, req)
	r := response{status: rec.Code, header: rec.Header(), raw: rec.Body.Bytes()}
	_ = json.Unmarshal(r.raw, &r.body)
	return r
}

// expect checks the status and, for errors, the problem code and media type.
func (r response) expect(t *testing.T, status int, code string) response {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.raw)
	}
	if code != "" {
		if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("content type %q, want application/problem+json", ct)
		}
		if r.body["code"] != code {
			t.Fatalf("code %v, want %s; body %s", r.body["code"], code, r.raw)
		}
		if int(r.body["status"].(float64)) != status {
			t.Errorf("problem status %v, want %d", r.body["status"], status)
		}
	}
	return r
}

func (r response) get(path ...string) any {
	var v any = r.body
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func (r response) str(path ...string) string { s, _ := r.get(path...).(string); return s }

func (r response) num(path ...string) int64 { f, _ := r.get(path...).(float64); return int64(f) }

var sessionBody = map[string]any{
	"repo": "acme/widgets", "role": "author", "issue": 12, "branch": "fix-12",
	"agent": map[string]any{"runtime": "claude-code", "provider": "anthropic", "model": "m", "instance": "host-7/pid-1"},
}

// newSession creates a session and returns its id, run id and token.
func (h *harness) newSession() (string, string, int64) {
	h.t.Helper()
	r := h.do("POST", "/v1/sessions", h.agent, sessionBody).expect(h.t, 201, "")
	return r.str("session", "id"), r.str("run", "id"), r.num("run", "fencing_token")
}

func checkpointDoc(runID string, token int64, mutate ...func(map[string]any)) map[string]any {
	d := map[string]any{
		"schema_version": 1, "run_id": runID, "fencing_token": token, "role": "author", "stage": "implementing",
		"identity":    map[string]any{"runtime": "claude-code"},
		"target":      map[string]any{"repo": "acme/widgets", "issue": 12},
		"workspace":   map[string]any{"branch": "fix-12", "head": "0123456789abcdef0123456789abcdef01234567"},
		"next_action": map[string]any{"actor": "author", "action": "run the tests"},
		"recovery":    map[string]any{"instructions": "git fetch && git checkout fix-12"},
	}
	for _, m := range mutate {
		m(d)
	}
	return d
}

// everyStore is api.Stores with w in every field: a *store.Store, or a
// test's wrapper of one that fails some of its methods.
func everyStore(w any) api.Stores {
	var st api.Stores
	v := reflect.ValueOf(&st).Elem()
	for i := range v.NumField() {
		v.Field(i).Set(reflect.ValueOf(w))
	}
	return st
}
