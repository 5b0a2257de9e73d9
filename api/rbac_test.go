package api_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// accessFixture is the session a matrix cell acts on: acme/widgets, with its
// first run and one checkpoint, created fresh for every cell by the operator.
type accessFixture struct {
	id, run string
	tok     int64
}

type accessRoute struct {
	method, pattern string // pattern as the router has it
	path            string // {id} is the fixture's session
	need            checkpointd.TokenRole
	scoped          bool
	ok              int
	body            func(f accessFixture) any
}

// accessRoutes is every route of api.New (checked against the router with
// chi.Walk) with the role it requires, whether the session's repo
// (or, for a new session, the body's) must be in the token's scope, and
// the documented success status for a valid body.
var accessRoutes = []accessRoute{
	{"GET", "/healthz", "/healthz", "", false, 200, nil},
	{"GET", "/readyz", "/readyz", "", false, 200, nil},
	{"GET", "/v1/schema/checkpoint", "/v1/schema/checkpoint", "", false, 200, nil},
	{"GET", "/v1/openapi.yaml", "/v1/openapi.yaml", "", false, 200, nil},
	{"POST", "/v1/sessions", "/v1/sessions", checkpointd.RoleAgent, true, 201,
		func(accessFixture) any { return sessionBody }},
	// Listing is never forbidden: it is filtered by scope (TestListsFilteredByScope).
	{"GET", "/v1/sessions", "/v1/sessions", checkpointd.RoleReader, false, 200, nil},
	{"GET", "/v1/fleet", "/v1/fleet", checkpointd.RoleReader, false, 200, nil},
	{"GET", "/v1/sessions/{id}/", "/v1/sessions/{id}", checkpointd.RoleReader, true, 200, nil},
	// Force-clear: operators only (their scope does not restrict them).
	{"DELETE", "/v1/sessions/{id}/", "/v1/sessions/{id}", checkpointd.RoleOperator, false, 204, nil},
	{"POST", "/v1/sessions/{id}/runs", "/v1/sessions/{id}/runs", checkpointd.RoleAgent, true, 201,
		func(accessFixture) any { return map[string]any{"takeover": true, "reason": "matrix"} }},
	{"POST", "/v1/sessions/{id}/checkpoints", "/v1/sessions/{id}/checkpoints", checkpointd.RoleAgent, true, 201,
		func(f accessFixture) any { return checkpointDoc(f.run, f.tok) }},
	{"GET", "/v1/sessions/{id}/checkpoints", "/v1/sessions/{id}/checkpoints", checkpointd.RoleReader, true, 200, nil},
	{"GET", "/v1/sessions/{id}/checkpoints/{seq}", "/v1/sessions/{id}/checkpoints/1", checkpointd.RoleReader, true, 200, nil},
	{"GET", "/v1/sessions/{id}/checkpoints/{seq}", "/v1/sessions/{id}/checkpoints/latest", checkpointd.RoleReader, true, 200, nil},
	{"GET", "/v1/sessions/{id}/resume", "/v1/sessions/{id}/resume", checkpointd.RoleAgent, true, 200, nil},
	{"POST", "/v1/sessions/{id}/end", "/v1/sessions/{id}/end", checkpointd.RoleAgent, true, 200,
		func(f accessFixture) any { return map[string]any{"run_id": f.run, "outcome": "completed"} }},
	{"POST", "/v1/sessions/{id}/heartbeat", "/v1/sessions/{id}/heartbeat", checkpointd.RoleAgent, true, 200,
		func(f accessFixture) any { return map[string]any{"run_id": f.run} }},
	{"POST", "/v1/sessions/{id}/park", "/v1/sessions/{id}/park", checkpointd.RoleOperator, true, 200,
		func(accessFixture) any { return map[string]any{"reason": "matrix"} }},
	{"GET", "/v1/sessions/{id}/events", "/v1/sessions/{id}/events", checkpointd.RoleReader, true, 200, nil},
	// Each cell leases a branch named after its own session, so it is free.
	{"POST", "/v1/leases", "/v1/leases", checkpointd.RoleAgent, true, 201,
		func(f accessFixture) any {
			return map[string]any{"resource": map[string]any{"kind": "branch", "repo": "acme/widgets", "branch": "matrix-" + f.id},
				"session_id": f.id, "run_id": f.run, "ttl_seconds": 60}
		}},
	// Listing is never forbidden: it is filtered by scope (TestListLeasesAPI).
	{"GET", "/v1/leases", "/v1/leases", checkpointd.RoleReader, false, 200, nil},
	// {id} is the fixture's session, which names no lease: these rows prove
	// authentication and role, which come before the lookup (404 once
	// allowed). The lease's scope (403) is checked in TestRenewLease and
	// TestReleaseLease.
	{"POST", "/v1/leases/{id}/renew", "/v1/leases/{id}/renew", checkpointd.RoleAgent, false, 404,
		func(f accessFixture) any { return map[string]any{"run_id": f.run} }},
	{"DELETE", "/v1/leases/{id}", "/v1/leases/{id}", checkpointd.RoleAgent, false, 404, nil},
	// Reconcile is daemon-wide: operators only, not scoped. Readers may see
	// the last report; a scoped one sees only its repos' details
	// (TestLastReportScoped). The harness has no forge, so a pass reports
	// "forge not configured" and changes no validity.
	{"POST", "/v1/reconcile", "/v1/reconcile", checkpointd.RoleOperator, false, 200, nil},
	{"GET", "/v1/reconcile/last", "/v1/reconcile/last", checkpointd.RoleReader, false, 200, nil},
	// The drain is daemon-wide: operators start, complete and cancel it;
	// readers see it, a scoped one only its repos' blocking sessions
	// (TestDrainRequests). Every cell cancels what it started, so the
	// next cell may create its session: complete and cancel then find no
	// open drain (404 once allowed, like the lease rows above).
	{"POST", "/v1/drain", "/v1/drain", checkpointd.RoleOperator, false, 201,
		func(accessFixture) any { return map[string]any{"reason": "matrix"} }},
	{"GET", "/v1/drain", "/v1/drain", checkpointd.RoleReader, false, 200, nil},
	{"GET", "/v1/drains", "/v1/drains", checkpointd.RoleReader, false, 200, nil},
	{"POST", "/v1/drain/complete", "/v1/drain/complete", checkpointd.RoleOperator, false, 404, nil},
	{"POST", "/v1/drain/cancel", "/v1/drain/cancel", checkpointd.RoleOperator, false, 404, nil},
	// Tokens are operators' alone. {id} names no token: revoking is 404
	// once allowed (TestTokenAPI revokes real ones).
	{"POST", "/v1/tokens", "/v1/tokens", checkpointd.RoleOperator, false, 201,
		func(accessFixture) any { return map[string]any{"role": "reader", "name": "matrix"} }},
	{"GET", "/v1/tokens", "/v1/tokens", checkpointd.RoleOperator, false, 200, nil},
	{"DELETE", "/v1/tokens/{id}", "/v1/tokens/{id}", checkpointd.RoleOperator, false, 404, nil},
	// Durable errors are daemon-wide: listing is never forbidden, it is
	// filtered by scope (TestErrorsScoped).
	{"GET", "/v1/errors", "/v1/errors", checkpointd.RoleReader, false, 200, nil},
	// The feed filtered to one session: the session must be in scope. Sent
	// as HEAD (headers only): a GET that succeeds streams until closed.
	{"GET", "/v1/watch", "/v1/watch?session={id}", checkpointd.RoleReader, true, 200, nil},
}

// roleRank orders token roles as §5 does: each role may do what the ones
// below it may.
var roleRank = map[checkpointd.TokenRole]int{checkpointd.RoleReader: 1, checkpointd.RoleAgent: 2, checkpointd.RoleOperator: 3}

// TestAccessMatrix drives every route × caller × scope: 401 without a
// usable token, 403 forbidden for a role too low or a repo out of scope
// (and nothing changes), the documented success status otherwise.
func TestAccessMatrix(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newHarness(t, b)

		var routed []string
		chi.Walk(h.handler.(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
			routed = append(routed, method+" "+route)
			return nil
		})
		for _, r := range routed {
			if !slices.ContainsFunc(accessRoutes, func(a accessRoute) bool { return a.method+" "+a.pattern == r }) {
				t.Errorf("route %s is not in the access matrix", r)
			}
		}

		// Callers per scope: "in" covers acme/widgets (in another case, as
		// forge names compare case-insensitively), "out" covers another owner.
		type caller struct {
			name  string
			token string
			role  checkpointd.TokenRole // "" for no usable token
		}
		scopes := map[string][]string{"in": {"Acme/Widgets"}, "out": {"other/*"}}
		callers := map[string][]caller{}
		for name, scope := range scopes {
			revoked := checkpointd.NewTokenSecret()
			tk, err := h.store.CreateToken(t.Context(), checkpointd.TokenSpec{Name: "revoked", Role: checkpointd.RoleOperator, Scope: scope}, checkpointd.HashToken(revoked))
			if err != nil {
				t.Fatal(err)
			}
			if err := h.store.RevokeToken(t.Context(), tk.ID); err != nil {
				t.Fatal(err)
			}
			callers[name] = []caller{
				{"no token", "", ""},
				{"bad token", checkpointd.NewTokenSecret(), ""},
				{"revoked operator", revoked, ""},
				{"reader", h.token(checkpointd.RoleReader, scope), checkpointd.RoleReader},
				{"agent", h.token(checkpointd.RoleAgent, scope), checkpointd.RoleAgent},
				{"operator", h.token(checkpointd.RoleOperator, scope), checkpointd.RoleOperator},
			}
		}

		// state is what a forbidden request must not change, seen by the operator.
		state := func(f accessFixture) string {
			n := len(h.do("GET", "/v1/sessions?limit=500", h.operator, nil).expect(t, 200, "").get("items").([]any))
			s := h.do("GET", "/v1/sessions/"+f.id, h.operator, nil).expect(t, 200, "")
			return fmt.Sprintf("%d sessions; %s run %s checkpoint %d", n, s.str("session", "state"),
				s.str("session", "current_run", "id"), s.num("session", "latest_checkpoint", "seq"))
		}

		cells := 0
		for _, rt := range accessRoutes {
			for _, scope := range []string{"in", "out"} {
				for _, c := range callers[scope] {
					name := fmt.Sprintf("%s %s/%s/%s scope", rt.method, rt.path, c.name, scope)
					t.Run(name, func(t *testing.T) {
						cells++
						status, code := rt.ok, ""
						switch {
						case rt.need == "":
						case c.role == "":
							status, code = http.StatusUnauthorized, "unauthorized"
						case roleRank[c.role] < roleRank[rt.need]:
							status, code = http.StatusForbidden, "forbidden"
						// Operators may do everything (§5): their scope does not restrict them.
						case rt.scoped && scope == "out" && c.role != checkpointd.RoleOperator:
							status, code = http.StatusForbidden, "forbidden"
						}

						f := accessFixture{}
						f.id, f.run, f.tok = h.newSession()
						h.do("POST", "/v1/sessions/"+f.id+"/checkpoints", h.agent, checkpointDoc(f.run, f.tok)).expect(t, 201, "")
						// A refused write must have changed nothing.
						refusedWrite := status >= 400 && rt.method != "GET"
						var before string
						if refusedWrite {
							before = state(f)
						}
						var body any
						if rt.body != nil {
							body = rt.body(f)
						}
						// A drain left running would refuse the next cells' sessions.
						defer h.do("POST", "/v1/drain/cancel", h.operator, nil)
						method := rt.method
						if rt.pattern == "/v1/watch" {
							method = http.MethodHead
						}
						r := h.do(method, strings.ReplaceAll(rt.path, "{id}", f.id), c.token, body).expect(t, status, code)
						if status == http.StatusUnauthorized && r.header.Get("WWW-Authenticate") == "" {
							t.Errorf("401 without WWW-Authenticate")
						}
						if refusedWrite {
							if after := state(f); after != before {
								t.Errorf("a %d request changed state: %s → %s", status, before, after)
							}
						}
					})
				}
			}
		}
		if want := len(accessRoutes) * len(scopes) * 6; cells != want {
			t.Errorf("%d cells ran, want %d", cells, want)
		}
		t.Logf("%d routes (%d rows) × 6 callers × 2 scopes = %d cells", len(routed), len(accessRoutes), cells)
	})
}

// TestListsFilteredByScope: a list shows exactly the sessions a token's
// scope covers, matched case-insensitively on owner and name, and a single
// read agrees with the list for every session.
func TestListsFilteredByScope(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newHarness(t, b)
		ids := map[string]string{} // repo → session id
		for _, repo := range []string{"acme/x", "Acme/Y", "other/z", "acmecorp/q"} {
			r := h.do("POST", "/v1/sessions", h.operator, map[string]any{"repo": repo, "role": "author"}).expect(t, 201, "")
			ids[repo] = r.str("session", "id")
		}
		all := []string{"acme/x", "Acme/Y", "other/z", "acmecorp/q"}
		cases := []struct {
			name  string
			role  checkpointd.TokenRole
			scope []string
			query string
			sees  []string
		}{
			{"out of scope", checkpointd.RoleReader, []string{"nobody/*"}, "", nil},
			{"owner wildcard", checkpointd.RoleReader, []string{"acme/*"}, "", []string{"acme/x", "Acme/Y"}},
			{"owner wildcard, other case", checkpointd.RoleReader, []string{"ACME/*"}, "", []string{"acme/x", "Acme/Y"}},
			{"one repo, other case", checkpointd.RoleReader, []string{"acme/y"}, "", []string{"Acme/Y"}},
			{"two entries", checkpointd.RoleReader, []string{"OTHER/Z", "acme/x"}, "", []string{"acme/x", "other/z"}},
			{"underscore is no wildcard", checkpointd.RoleReader, []string{"a_me/*"}, "", nil},
			{"agent", checkpointd.RoleAgent, []string{"acme/*"}, "", []string{"acme/x", "Acme/Y"}},
			{"repo filter outside the scope", checkpointd.RoleReader, []string{"acme/*"}, "?repo=other/z", nil},
			{"repo filter inside the scope", checkpointd.RoleReader, []string{"acme/*"}, "?repo=ACME/y", []string{"Acme/Y"}},
			{"no scope: every repo", checkpointd.RoleReader, nil, "", all},
			{"scoped operator: every repo", checkpointd.RoleOperator, []string{"other/*"}, "", all},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				tok := h.token(c.role, c.scope)
				var got, want []string
				for _, it := range h.do("GET", "/v1/sessions"+c.query, tok, nil).expect(t, 200, "").get("items").([]any) {
					got = append(got, it.(map[string]any)["repo"].(string))
				}
				want = append(want, c.sees...)
				slices.Sort(got)
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Errorf("lists %v, want %v", got, want)
				}
				if c.query != "" {
					return
				}
				for _, repo := range all {
					status, code := http.StatusForbidden, "forbidden"
					if slices.Contains(c.sees, repo) {
						status, code = http.StatusOK, ""
					}
					h.do("GET", "/v1/sessions/"+ids[repo], tok, nil).expect(t, status, code)
				}
			})
		}
	})
}
