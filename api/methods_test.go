package api_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestHeadServesEveryGetRoute: HEAD on every GET route answers as GET
// does — status, Content-Type, Content-Length when GET sends one — with
// no body, through a real HTTP server (HEAD used to be 405).
func TestHeadServesEveryGetRoute(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newHarness(t, b)
		srv := httptest.NewServer(h.handler)
		defer srv.Close()
		id, run, tok := h.newSession()
		h.do("POST", "/v1/sessions/"+id+"/checkpoints", h.agent, checkpointDoc(run, tok)).expect(t, 201, "")
		send := func(method, path, token string) (*http.Response, []byte) {
			t.Helper()
			req, _ := http.NewRequestWithContext(t.Context(), method, srv.URL+path, nil)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			return resp, body
		}
		paths := map[string]bool{"/v1/nothing": true} // a 404 stays a 404
		for _, rt := range accessRoutes {
			// A watch stream's GET never ends: TestWatchRequests checks its HEAD.
			if rt.method == "GET" && rt.pattern != "/v1/watch" {
				paths[strings.ReplaceAll(rt.path, "{id}", id)] = true
			}
		}
		for path := range paths {
			for _, token := range []string{h.operator, ""} { // answered, and refused (401) on the routes behind a token
				get, getBody := send("GET", path, token)
				head, headBody := send("HEAD", path, token)
				if head.StatusCode != get.StatusCode {
					t.Errorf("HEAD %s: %d, GET: %d", path, head.StatusCode, get.StatusCode)
				}
				if hc, gc := head.Header.Get("Content-Type"), get.Header.Get("Content-Type"); hc != gc {
					t.Errorf("HEAD %s: Content-Type %q, GET: %q", path, hc, gc)
				}
				if gl := get.Header.Get("Content-Length"); gl != "" && head.Header.Get("Content-Length") != gl {
					t.Errorf("HEAD %s: Content-Length %q, GET: %q", path, head.Header.Get("Content-Length"), gl)
				}
				if len(headBody) != 0 {
					t.Errorf("HEAD %s sent a body: %.100s", path, headBody)
				}
				if len(getBody) == 0 {
					t.Errorf("GET %s sent no body", path)
				}
			}
		}
	})
}

// TestMethodNotAllowedSaysAllow: every 405 carries an Allow header naming
// exactly the methods the route serves (HEAD wherever GET is).
func TestMethodNotAllowedSaysAllow(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newHarness(t, b)
		serves := map[string][]string{} // path → methods
		chi.Walk(h.handler.(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
			path := strings.NewReplacer("{id}", "ses_x", "{seq}", "1").Replace(routePattern(route))
			serves[path] = append(serves[path], method)
			if method == "GET" {
				serves[path] = append(serves[path], "HEAD")
			}
			return nil
		})
		checked := 0
		for path, methods := range serves {
			slices.Sort(methods)
			for _, m := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"} {
				if slices.Contains(methods, m) {
					continue
				}
				r := h.do(m, path, h.operator, nil).expect(t, 405, "")
				if m != "HEAD" && r.body["code"] != "method_not_allowed" {
					t.Errorf("%s %s: %s", m, path, r.raw)
				}
				var allow []string
				for _, f := range strings.Split(r.header.Get("Allow"), ",") {
					if f = strings.TrimSpace(f); f != "" {
						allow = append(allow, f)
					}
				}
				slices.Sort(allow)
				if !slices.Equal(allow, methods) {
					t.Errorf("%s %s: 405 with Allow %q, want %s", m, path, r.header.Get("Allow"), strings.Join(methods, ", "))
				}
				checked++
			}
		}
		if checked < len(serves) {
			t.Fatalf("only %d 405s checked over %d paths", checked, len(serves))
		}
	})
}
