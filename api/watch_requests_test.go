package api_test

import (
	"strings"
	"testing"

	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestWatchRequests: a bad filter is a 422 naming the parameter, a session
// out of the token's scope 403, an unknown one 404, no token 401, all
// before any stream starts; HEAD answers the stream's headers alone.
func TestWatchRequests(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newHarness(t, b)
		gadgets := h.agentSession("g", "acme/gadgets", "author", "fix-g") // outside the reader's scope
		cleared := h.agentSession("c", "acme/widgets", "author", "fix-c")
		h.do("DELETE", "/v1/sessions/"+cleared.id, h.operator, map[string]any{"reason": "stuck"}).expect(t, 204, "")
		for _, tc := range []struct {
			name, query, token string
			status             int
			code, path         string
		}{
			{"bad session id", "?session=not%20an%20id", h.reader, 422, "invalid_request", "session"},
			{"bad repo", "?repo=acme", h.reader, 422, "invalid_request", "repo"},
			{"bad repo pattern", "?repo=*/*", h.reader, 422, "invalid_request", "repo"},
			{"unknown session", "?session=ses_0123456789abcdef0123456789abcdef", h.reader, 404, "not_found", ""},
			{"cleared session", "?session=" + cleared.id, h.reader, 410, "gone", ""},
			{"session out of scope", "?session=" + gadgets.id, h.reader, 403, "forbidden", ""},
			{"no token", "", "", 401, "unauthorized", ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := h.do("GET", "/v1/watch"+tc.query, tc.token, nil).expect(t, tc.status, tc.code)
				if tc.status == 403 && strings.Contains(string(r.raw), "gadgets") {
					t.Errorf("the 403 names the session's repository: %s", r.raw)
				}
				if tc.path == "" {
					return
				}
				ps, _ := r.get("problems").([]any)
				if len(ps) != 1 || ps[0].(map[string]any)["path"] != tc.path {
					t.Errorf("problems %v, want one at %s", ps, tc.path)
				}
			})
		}
		r := h.do("HEAD", "/v1/watch?repo=acme/*", h.reader, nil).expect(t, 200, "")
		for k, want := range map[string]string{"Content-Type": "text/event-stream", "Cache-Control": "no-store", "X-Accel-Buffering": "no"} {
			if got := r.header.Get(k); got != want {
				t.Errorf("%s: %q, want %q", k, got, want)
			}
		}
	})
}
