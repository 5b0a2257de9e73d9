package api_test

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/api"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestTokenAPI mints, lists and revokes tokens over the API on both
// backends: the secret is in the mint's answer only and works at once; an
// expiry ends it; last_used_at moves at most once a minute; a revoked
// token is refused and a second revoke is a 404.
func TestTokenAPI(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		clock := checkpointd.NewManualClock(time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC))
		h := newHarnessOn(t, storetest.Open(t, b, clock))

		r := h.do("POST", "/v1/tokens", h.operator, map[string]any{"role": "agent", "name": "ci agent", "scopes": []string{"acme/*"},
			"expires_in_seconds": 3600}).expect(t, 201, "")
		secret, id := r.str("secret"), r.str("token", "id")
		if !strings.HasPrefix(secret, "cpd_") || id == "" {
			t.Fatalf("mint answered %s", r.raw)
		}
		if got := r.str("token", "expires_at"); got != "2026-12-06T10:00:00Z" {
			t.Errorf("expires_at %q, want an hour after now", got)
		}
		if r.get("token", "last_used_at") != nil || r.str("token", "role") != "agent" {
			t.Errorf("the new token: %s", r.raw)
		}
		listed := func() any {
			t.Helper()
			l := h.do("GET", "/v1/tokens?limit=500", h.operator, nil).expect(t, 200, "")
			if strings.Contains(string(l.raw), secret) || strings.Contains(string(l.raw), checkpointd.HashToken(secret)) {
				t.Fatalf("the list carries the secret or its hash: %s", l.raw)
			}
			for _, it := range l.get("items").([]any) {
				if tk := it.(map[string]any); tk["id"] == id {
					return tk["last_used_at"]
				}
			}
			t.Fatalf("the list lacks %s: %s", id, l.raw)
			return nil
		}
		// last_used_at is written in the background: wait for want, or
		// for a short while when nothing should change.
		lastUsed := func(want any) any {
			t.Helper()
			deadline := time.Now().Add(5 * time.Second)
			if want == nil {
				deadline = time.Now().Add(200 * time.Millisecond)
			}
			for {
				got := listed()
				if got == want || time.Now().After(deadline) {
					return got
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		if got := lastUsed(nil); got != nil {
			t.Errorf("last_used_at set before any use: %v", got)
		}
		h.do("POST", "/v1/sessions", secret, sessionBody).expect(t, 201, "")
		if got := lastUsed("2026-12-06T09:00:00Z"); got != "2026-12-06T09:00:00Z" {
			t.Errorf("last_used_at after a use: %v", got)
		}
		clock.Advance(30 * time.Second)
		h.do("GET", "/v1/sessions", secret, nil).expect(t, 200, "")
		time.Sleep(200 * time.Millisecond) // a write, were one started, would land
		if got := listed(); got != "2026-12-06T09:00:00Z" {
			t.Errorf("last_used_at moved within the minute: %v", got)
		}
		clock.Advance(31 * time.Second)
		h.do("GET", "/v1/sessions", secret, nil).expect(t, 200, "")
		if got := lastUsed("2026-12-06T09:01:01Z"); got != "2026-12-06T09:01:01Z" {
			t.Errorf("last_used_at a minute later: %v", got)
		}
		// Scoped as minted: another owner's repo is refused.
		other := map[string]any{"repo": "other/tool", "role": "author", "issue": 1, "agent": sessionBody["agent"]}
		h.do("POST", "/v1/sessions", secret, other).expect(t, 403, "forbidden")

		clock.Advance(59 * time.Minute)
		r = h.do("GET", "/v1/sessions", secret, nil).expect(t, 401, "unauthorized")
		if !strings.Contains(string(r.raw), "expired at 2026-12-06T10:00:00Z") {
			t.Errorf("an expired token's 401 does not say so: %s", r.raw)
		}

		all := h.do("POST", "/v1/tokens", h.operator, map[string]any{"role": "agent", "name": "fleet", "scopes": []string{"*"}}).expect(t, 201, "")
		if all.get("token", "expires_at") != nil {
			t.Errorf("a token minted without expiry expires: %s", all.raw)
		}
		h.do("POST", "/v1/sessions", all.str("secret"), other).expect(t, 201, "")
		h.do("DELETE", "/v1/tokens/"+all.str("token", "id"), h.operator, nil).expect(t, 204, "")
		h.do("GET", "/v1/sessions", all.str("secret"), nil).expect(t, 401, "unauthorized")
		h.do("DELETE", "/v1/tokens/"+all.str("token", "id"), h.operator, nil).expect(t, 404, "not_found")
		h.do("DELETE", "/v1/tokens/tok_nope", h.operator, nil).expect(t, 404, "not_found")
	})
}

// TestTokenAPIRefusals: what the token API refuses, and who may call it.
func TestTokenAPIRefusals(t *testing.T) {
	h := newHarness(t, storetest.SQLite)
	for _, tc := range []struct {
		name string
		body map[string]any
		path string
	}{
		{"agent without scopes", map[string]any{"role": "agent", "name": "a"}, "/scopes"},
		{"agent with empty scopes", map[string]any{"role": "agent", "name": "a", "scopes": []string{}}, "/scopes"},
		{"bad scope", map[string]any{"role": "reader", "name": "a", "scopes": []string{"acme"}}, "/scopes/0"},
		{"unknown role", map[string]any{"role": "admin", "name": "a"}, "/role"},
		{"no name", map[string]any{"role": "reader"}, "/name"},
		{"zero lifetime", map[string]any{"role": "reader", "name": "a", "expires_in_seconds": 0}, "/expires_in_seconds"},
		{"negative lifetime", map[string]any{"role": "reader", "name": "a", "expires_in_seconds": -5}, "/expires_in_seconds"},
		{"eleven years", map[string]any{"role": "reader", "name": "a", "expires_in_seconds": 11 * 365 * 86400}, "/expires_in_seconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.do("POST", "/v1/tokens", h.operator, tc.body).expect(t, 422, "invalid_request")
			if !strings.Contains(string(r.raw), `"`+tc.path+`"`) {
				t.Errorf("the refusal does not name %s: %s", tc.path, r.raw)
			}
		})
	}
	h.do("POST", "/v1/tokens", h.operator, `{"role":"reader","name":"a","secret":"mine"}`).expect(t, 422, "invalid_request")
	h.do("POST", "/v1/tokens", h.operator, `{"role":`).expect(t, 400, "invalid_json")
	for _, tok := range []string{h.agent, h.reader} {
		h.do("POST", "/v1/tokens", tok, map[string]any{"role": "operator", "name": "me"}).expect(t, 403, "forbidden")
		h.do("GET", "/v1/tokens", tok, nil).expect(t, 403, "forbidden")
		h.do("DELETE", "/v1/tokens/tok_x", tok, nil).expect(t, 403, "forbidden")
	}
	toks, err := h.store.ListTokens(t.Context(), "", 0)
	if err != nil || len(toks) != 3 {
		t.Errorf("after the refusals the store holds %d tokens (%v), want the harness's 3", len(toks), err)
	}
}

// TestTokenListPages: the token list is bounded and paged like every list.
func TestTokenListPages(t *testing.T) {
	h := newHarness(t, storetest.SQLite)
	for i := range 4 {
		h.do("POST", "/v1/tokens", h.operator, map[string]any{"role": "reader", "name": "r" + string(rune('a'+i))}).expect(t, 201, "")
	}
	seen := map[string]bool{}
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("the pages do not end")
		}
		r := h.do("GET", "/v1/tokens?limit=3"+cursor, h.operator, nil).expect(t, 200, "")
		for _, it := range r.get("items").([]any) {
			id := it.(map[string]any)["id"].(string)
			if seen[id] {
				t.Errorf("%s on two pages", id)
			}
			seen[id] = true
		}
		next := r.str("next_cursor")
		if next == "" {
			break
		}
		cursor = "&cursor=" + next
	}
	if len(seen) != 7 {
		t.Errorf("the pages held %d tokens, want 7", len(seen))
	}
}

// TestTokenHashIsNoCredential: the hash the store keeps of a token (which
// console sessions keep too) authenticates nothing as a bearer token; only
// an in-process caller's context (api.InProcessToken) carries one.
func TestTokenHashIsNoCredential(t *testing.T) {
	h := newHarness(t, storetest.SQLite)
	h.do("GET", "/v1/sessions", h.operator, nil).expect(t, 200, "")
	h.do("GET", "/v1/sessions", checkpointd.HashToken(h.operator), nil).expect(t, 401, "unauthorized")
	req := httptest.NewRequest("GET", "/v1/sessions", nil)
	rec := httptest.NewRecorder()
	h.handler.ServeHTTP(rec, req.WithContext(api.InProcessToken(req.Context(), checkpointd.HashToken(h.operator))))
	if rec.Code != 200 {
		t.Errorf("an in-process request with the token's hash: %d %s", rec.Code, rec.Body)
	}
}
