package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/api"
	"github.com/checkpointd/checkpointd/store/storetest"
)

var leaseT0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// leaseHarness is the API over a store whose clock the test moves, so every
// expiry is deterministic.
type leaseHarness struct {
	*harness
	clock *checkpointd.ManualClock
}

func newLeaseHarness(t *testing.T, b storetest.Backend) *leaseHarness {
	t.Helper()
	clock := checkpointd.NewManualClock(leaseT0)
	s := storetest.Open(t, b, clock)
	h := &harness{t: t, store: s}
	h.handler = api.New(api.Deps{Store: api.StoresOf(s), Workflow: checkpointd.DefaultWorkflow(), DigestKey: testDigestKey,
		MaxDocumentBytes: 8 << 10})
	h.operator = h.token(checkpointd.RoleOperator, nil)
	h.agent = h.token(checkpointd.RoleAgent, []string{"acme/*"})
	h.reader = h.token(checkpointd.RoleReader, []string{"acme/widgets"})
	return &leaseHarness{harness: h, clock: clock}
}

type apiSession struct {
	id, run string
	tok     int64
}

func (h *leaseHarness) session() apiSession {
	h.t.Helper()
	id, run, tok := h.newSession()
	return apiSession{id, run, tok}
}

func issue(n int) map[string]any {
	return map[string]any{"kind": "issue", "repo": "acme/widgets", "number": n}
}

func leaseReq(s apiSession, res map[string]any, ttl int) map[string]any {
	return map[string]any{"resource": res, "session_id": s.id, "run_id": s.run, "ttl_seconds": ttl}
}

// acquire grants res to s for ttl seconds and returns the lease object.
func (h *leaseHarness) acquire(s apiSession, res map[string]any, ttl int) map[string]any {
	h.t.Helper()
	r := h.do("POST", "/v1/leases", h.agent, leaseReq(s, res, ttl)).expect(h.t, 201, "")
	return r.get("lease").(map[string]any)
}

// events lists a session's event kinds after seq after, seen by the operator.
func (h *leaseHarness) events(id string, after int) []map[string]any {
	h.t.Helper()
	r := h.do("GET", fmt.Sprintf("/v1/sessions/%s/events?after=%d&limit=500", id, after), h.operator, nil).expect(h.t, 200, "")
	var out []map[string]any
	for _, it := range r.get("items").([]any) {
		out = append(out, it.(map[string]any))
	}
	return out
}

func eventKinds(evs []map[string]any) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e["kind"].(string))
	}
	return out
}

// state is what a refused lease call must leave unchanged: every lease
// and every event of the given sessions.
func (h *leaseHarness) state(ids ...string) string {
	h.t.Helper()
	var b strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&b, "%s %v\n", id, eventKinds(h.events(id, 0)))
		r := h.do("GET", "/v1/leases?limit=500&session_id="+id, h.operator, nil).expect(h.t, 200, "")
		for _, it := range r.get("items").([]any) {
			l := it.(map[string]any)
			fmt.Fprintf(&b, "  %v %v %v %v %v\n", l["id"], l["state"], l["holder"], l["fencing_token"], l["expires_at"])
		}
	}
	return b.String()
}

func at(t *testing.T, v any) time.Time {
	t.Helper()
	s, _ := v.(string)
	tm, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("time %v: %v", v, err)
	}
	return tm
}

func problemPaths(r response) []string {
	var out []string
	ps, _ := r.get("problems").([]any)
	for _, p := range ps {
		out = append(out, p.(map[string]any)["path"].(string))
	}
	return out
}

// TestAcquireLease: 201 with the lease and its Location; 409 lease_held for
// anyone else, naming the holder.
func TestAcquireLease(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newLeaseHarness(t, b)
		a, c := h.session(), h.session()
		r := h.do("POST", "/v1/leases", h.agent, leaseReq(a, issue(12), 60)).expect(t, 201, "")
		l := r.get("lease").(map[string]any)
		id, _ := l["id"].(string)
		if !strings.HasPrefix(id, checkpointd.PrefixLease) || r.header.Get("Location") != "/v1/leases/"+id {
			t.Errorf("lease id %q, Location %q", id, r.header.Get("Location"))
		}
		if got := fmt.Sprint(l["resource"]); got != "map[kind:issue number:12 repo:acme/widgets]" {
			t.Errorf("resource %s", got)
		}
		if r.str("lease", "holder", "session_id") != a.id || r.str("lease", "holder", "run_id") != a.run ||
			r.num("lease", "fencing_token") != 1 || r.str("lease", "state") != "held" {
			t.Errorf("lease %s", r.raw)
		}
		if got := at(t, l["expires_at"]); !got.Equal(leaseT0.Add(time.Minute)) {
			t.Errorf("expires_at %v, want %v", got, leaseT0.Add(time.Minute))
		}

		for name, res := range map[string]map[string]any{
			"same resource":             issue(12),
			"same resource, other case": {"kind": "issue", "repo": "ACME/Widgets", "number": 12},
		} {
			t.Run(name, func(t *testing.T) {
				before := h.state(a.id, c.id)
				held := h.do("POST", "/v1/leases", h.agent, leaseReq(c, res, 60)).expect(t, 409, "lease_held")
				holder, _ := held.get("holder").(map[string]any)
				want := map[string]any{"lease_id": id, "session_id": a.id, "run_id": a.run, "fencing_token": float64(1), "expires_at": l["expires_at"]}
				if diff := cmp.Diff(want, holder); diff != "" {
					t.Errorf("holder member (-want +got):\n%s", diff)
				}
				if after := h.state(a.id, c.id); after != before {
					t.Errorf("a 409 changed state:\n%s→\n%s", before, after)
				}
			})
		}
		// Another kind, number or branch of the same repo is another resource.
		for _, res := range []map[string]any{
			{"kind": "pr", "repo": "acme/widgets", "number": 12},
			issue(13),
			{"kind": "branch", "repo": "acme/widgets", "branch": "fix-12"},
			{"kind": "branch", "repo": "acme/widgets", "branch": "Fix-12"},
		} {
			h.acquire(c, res, 60)
		}
		if diff := cmp.Diff([]string{"session.created", "run.started", "lease.acquired"}, eventKinds(h.events(a.id, 0))); diff != "" {
			t.Errorf("holder's log (-want +got):\n%s", diff)
		}
	})
}

// TestAcquireLeaseOneWinner: concurrent acquires over HTTP of one free
// resource: one 201, every other answer 409 lease_held naming the winner.
func TestAcquireLeaseOneWinner(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newLeaseHarness(t, b)
		const n = 12
		var sessions []apiSession
		for range n {
			sessions = append(sessions, h.session())
		}
		var wg sync.WaitGroup
		results := make([]response, n)
		start := make(chan struct{})
		for i, s := range sessions {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				results[i] = h.do("POST", "/v1/leases", h.agent, leaseReq(s, map[string]any{"kind": "pr", "repo": "acme/widgets", "number": 34}, 60))
			}()
		}
		close(start)
		wg.Wait()
		var winner string
		for _, r := range results {
			if r.status == 201 {
				if winner != "" {
					t.Fatalf("two winners: %s and %s", winner, r.str("lease", "id"))
				}
				winner = r.str("lease", "id")
			}
		}
		if winner == "" {
			t.Fatal("no winner")
		}
		for _, r := range results {
			if r.status == 201 {
				continue
			}
			if r.status != 409 || r.body["code"] != "lease_held" || r.str("holder", "lease_id") != winner {
				t.Errorf("loser got %d %s, want 409 lease_held naming %s", r.status, r.raw, winner)
			}
		}
	})
}

// TestAcquireLeaseRejected: every refusal of POST /v1/leases with its
// documented status and code, and no change of state.
func TestAcquireLeaseRejected(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newLeaseHarness(t, b)
		a := h.session()
		old := a.run
		tk := h.do("POST", "/v1/sessions/"+a.id+"/runs", h.agent, map[string]any{"takeover": true}).expect(t, 201, "")
		a.run = tk.str("run", "id")
		other := h.session()
		ended := h.session()
		h.do("POST", "/v1/sessions/"+ended.id+"/end", h.agent, map[string]any{"run_id": ended.run, "outcome": "abandoned"}).expect(t, 200, "")
		fr := h.do("POST", "/v1/sessions", h.operator, map[string]any{"repo": "other/thing", "role": "author"}).expect(t, 201, "")
		foreign := apiSession{fr.str("session", "id"), fr.str("run", "id"), 1}

		with := func(s apiSession, mutate func(m map[string]any)) map[string]any {
			m := leaseReq(s, issue(1), 60)
			mutate(m)
			return m
		}
		res := func(r map[string]any) func(m map[string]any) { return func(m map[string]any) { m["resource"] = r } }
		cases := []struct {
			name   string
			token  string
			body   any
			status int
			code   string
			paths  []string
		}{
			{"unknown kind", h.agent, with(a, res(map[string]any{"kind": "commit", "repo": "acme/widgets", "number": 1})), 422, "invalid_request", []string{"/resource/kind"}},
			{"issue without number", h.agent, with(a, res(map[string]any{"kind": "issue", "repo": "acme/widgets"})), 422, "invalid_request", []string{"/resource/number"}},
			{"pr number 0", h.agent, with(a, res(map[string]any{"kind": "pr", "repo": "acme/widgets", "number": 0})), 422, "invalid_request", []string{"/resource/number"}},
			{"branch without branch", h.agent, with(a, res(map[string]any{"kind": "branch", "repo": "acme/widgets"})), 422, "invalid_request", []string{"/resource/branch"}},
			{"number on a branch lease", h.agent, with(a, res(map[string]any{"kind": "branch", "repo": "acme/widgets", "branch": "x", "number": 3})), 422, "invalid_request", []string{"/resource/number"}},
			{"branch on an issue lease", h.agent, with(a, res(map[string]any{"kind": "issue", "repo": "acme/widgets", "number": 3, "branch": "x"})), 422, "invalid_request", []string{"/resource/branch"}},
			{"branch too long", h.agent, with(a, res(map[string]any{"kind": "branch", "repo": "acme/widgets", "branch": strings.Repeat("b", 256)})), 422, "invalid_request", []string{"/resource/branch"}},
			{"resource of another repo", h.agent, with(a, res(map[string]any{"kind": "issue", "repo": "acme/other", "number": 1})), 422, "invalid_request", []string{"/resource/repo"}},
			{"no resource", h.agent, with(a, func(m map[string]any) { delete(m, "resource") }), 422, "invalid_request", []string{"/resource/repo", "/resource/kind"}},
			{"ttl 0", h.agent, with(a, func(m map[string]any) { m["ttl_seconds"] = 0 }), 422, "invalid_request", []string{"/ttl_seconds"}},
			{"no ttl", h.agent, with(a, func(m map[string]any) { delete(m, "ttl_seconds") }), 422, "invalid_request", []string{"/ttl_seconds"}},
			{"ttl 5", h.agent, with(a, func(m map[string]any) { m["ttl_seconds"] = 5 }), 422, "invalid_request", []string{"/ttl_seconds"}},
			{"ttl 86401", h.agent, with(a, func(m map[string]any) { m["ttl_seconds"] = 86401 }), 422, "invalid_request", []string{"/ttl_seconds"}},
			{"ttl negative", h.agent, with(a, func(m map[string]any) { m["ttl_seconds"] = -60 }), 422, "invalid_request", []string{"/ttl_seconds"}},
			{"ttl huge", h.agent, with(a, func(m map[string]any) { m["ttl_seconds"] = int64(1) << 62 }), 422, "invalid_request", []string{"/ttl_seconds"}},
			{"ttl as a string", h.agent, with(a, func(m map[string]any) { m["ttl_seconds"] = "60" }), 422, "invalid_request", nil},
			{"no run", h.agent, with(a, func(m map[string]any) { delete(m, "run_id") }), 422, "invalid_request", []string{"/run_id"}},
			{"unknown field", h.agent, with(a, func(m map[string]any) { m["tll_seconds"] = 60 }), 422, "invalid_request", nil},
			{"unknown resource field", h.agent, with(a, res(map[string]any{"kind": "issue", "repo": "acme/widgets", "number": 1, "id": 9})), 422, "invalid_request", nil},
			{"malformed JSON", h.agent, `{"resource": {`, 400, "invalid_json", nil},
			{"empty body", h.agent, nil, 400, "invalid_json", nil},
			{"too large", h.agent, with(a, func(m map[string]any) { m["pad"] = strings.Repeat("x", 70<<10) }), 413, "payload_too_large", nil},
			{"unknown session", h.agent, with(a, func(m map[string]any) { m["session_id"] = "ses_00000000000000000000000000000000" }), 404, "not_found", nil},
			{"superseded run", h.agent, with(a, func(m map[string]any) { m["run_id"] = old }), 409, "run_superseded", nil},
			{"another session's run", h.agent, with(a, func(m map[string]any) { m["run_id"] = other.run }), 409, "run_superseded", nil},
			{"ended session", h.agent, leaseReq(ended, issue(1), 60), 409, "session_ended", nil},
			{"session out of the token's scope", h.agent, leaseReq(foreign, map[string]any{"kind": "issue", "repo": "other/thing", "number": 1}, 60), 403, "forbidden", nil},
			{"reader", h.reader, leaseReq(a, issue(1), 60), 403, "forbidden", nil},
			{"no token", "", leaseReq(a, issue(1), 60), 401, "unauthorized", nil},
		}
		ids := []string{a.id, other.id, ended.id, foreign.id}
		before := h.state(ids...)
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				r := h.do("POST", "/v1/leases", c.token, c.body).expect(t, c.status, c.code)
				if c.paths != nil {
					if diff := cmp.Diff(c.paths, problemPaths(r)); diff != "" {
						t.Errorf("problem paths (-want +got):\n%s", diff)
					}
				}
				if after := h.state(ids...); after != before {
					t.Errorf("a %d changed state:\n%s→\n%s", c.status, before, after)
				}
			})
		}
		body, _ := json.Marshal(leaseReq(a, issue(1), 60))
		req := httptest.NewRequest("POST", "/v1/leases", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+h.agent)
		req.Header.Set("Content-Type", "text/plain")
		rec := httptest.NewRecorder()
		h.serve(rec, req)
		if rec.Code != http.StatusUnsupportedMediaType {
			t.Errorf("text/plain body: %d %s, want 415", rec.Code, rec.Body)
		}
		if after := h.state(ids...); after != before {
			t.Errorf("a 415 changed state:\n%s→\n%s", before, after)
		}
		// Bounds are inclusive.
		h.acquire(a, issue(10), 10)
		h.acquire(a, issue(11), 86400)
	})
}

// TestRenewLease: 200 for the holder with the new expiry; 409 lease_lost for
// anyone else, after expiry (reaped or not), after release and for a
// superseded run; 404, 422, 400, 403 and 401 as documented; no refusal
// changes anything.
func TestRenewLease(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newLeaseHarness(t, b)
		a, other := h.session(), h.session()
		l := h.acquire(a, issue(1), 60)
		id := l["id"].(string)
		path := "/v1/leases/" + id + "/renew"

		h.clock.Advance(30 * time.Second)
		r := h.do("POST", path, h.agent, map[string]any{"run_id": a.run, "ttl_seconds": 120}).expect(t, 200, "")
		if got := at(t, r.get("lease", "expires_at")); !got.Equal(leaseT0.Add(150 * time.Second)) {
			t.Errorf("renewed expires_at %v, want now+120s = %v", got, leaseT0.Add(150*time.Second))
		}
		if r.str("lease", "id") != id || r.num("lease", "fencing_token") != 1 || r.str("lease", "state") != "held" {
			t.Errorf("renewed lease %s", r.raw)
		}

		fr := h.do("POST", "/v1/sessions", h.operator, map[string]any{"repo": "other/thing", "role": "author"}).expect(t, 201, "")
		foreign := apiSession{fr.str("session", "id"), fr.str("run", "id"), 1}
		fl := h.do("POST", "/v1/leases", h.operator, leaseReq(foreign, map[string]any{"kind": "issue", "repo": "other/thing", "number": 1}, 60)).expect(t, 201, "")
		foreignPath := "/v1/leases/" + fl.str("lease", "id") + "/renew"

		cases := []struct {
			name   string
			token  string
			path   string
			body   any
			status int
			code   string
		}{
			{"another session's run", h.agent, path, map[string]any{"run_id": other.run}, 409, "lease_lost"},
			{"unknown run", h.agent, path, map[string]any{"run_id": "run_00000000000000000000000000000000"}, 409, "lease_lost"},
			{"no run", h.agent, path, map[string]any{"ttl_seconds": 60}, 422, "invalid_request"},
			{"ttl 5", h.agent, path, map[string]any{"run_id": a.run, "ttl_seconds": 5}, 422, "invalid_request"},
			{"ttl 86401", h.agent, path, map[string]any{"run_id": a.run, "ttl_seconds": 86401}, 422, "invalid_request"},
			{"ttl negative", h.agent, path, map[string]any{"run_id": a.run, "ttl_seconds": -1}, 422, "invalid_request"},
			{"unknown field", h.agent, path, map[string]any{"run_id": a.run, "ttl": 60}, 422, "invalid_request"},
			{"malformed JSON", h.agent, path, `{"run_id":`, 400, "invalid_json"},
			{"empty body", h.agent, path, nil, 400, "invalid_json"},
			{"unknown lease", h.agent, "/v1/leases/lse_00000000000000000000000000000000/renew", map[string]any{"run_id": a.run}, 404, "not_found"},
			{"malformed lease id", h.agent, "/v1/leases/no%20such/renew", map[string]any{"run_id": a.run}, 404, "not_found"},
			{"lease out of the token's scope", h.agent, foreignPath, map[string]any{"run_id": foreign.run}, 403, "forbidden"},
			{"reader", h.reader, path, map[string]any{"run_id": a.run}, 403, "forbidden"},
			{"no token", "", path, map[string]any{"run_id": a.run}, 401, "unauthorized"},
		}
		before := h.state(a.id, other.id, foreign.id)
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				h.do("POST", c.path, c.token, c.body).expect(t, c.status, c.code)
				if after := h.state(a.id, other.id, foreign.id); after != before {
					t.Errorf("a %d changed state:\n%s→\n%s", c.status, before, after)
				}
			})
		}

		// Past its expiry the holder has lost it: before the worker ran, and after.
		h.clock.Advance(120 * time.Second)
		before = h.state(a.id)
		h.do("POST", path, h.agent, map[string]any{"run_id": a.run, "ttl_seconds": 60}).expect(t, 409, "lease_lost")
		if after := h.state(a.id); after != before {
			t.Errorf("a late renewal changed state:\n%s→\n%s", before, after)
		}
		if _, err := h.store.ExpireLeases(t.Context(), 100); err != nil {
			t.Fatal(err)
		}
		h.do("POST", path, h.agent, map[string]any{"run_id": a.run, "ttl_seconds": 60}).expect(t, 409, "lease_lost")

		// After a release, and for a superseded run.
		l2 := h.acquire(a, issue(2), 60)
		h.do("DELETE", "/v1/leases/"+l2["id"].(string)+"?run_id="+a.run, h.agent, nil).expect(t, 204, "")
		h.do("POST", "/v1/leases/"+l2["id"].(string)+"/renew", h.agent, map[string]any{"run_id": a.run}).expect(t, 409, "lease_lost")
		l3 := h.acquire(a, issue(3), 60)
		tk := h.do("POST", "/v1/sessions/"+a.id+"/runs", h.agent, map[string]any{"takeover": true}).expect(t, 201, "")
		h.do("POST", "/v1/leases/"+l3["id"].(string)+"/renew", h.agent, map[string]any{"run_id": a.run}).expect(t, 409, "lease_lost")
		h.do("POST", "/v1/leases/"+l3["id"].(string)+"/renew", h.agent, map[string]any{"run_id": tk.str("run", "id")}).expect(t, 200, "")

		want := []string{"lease.acquired", "lease.renewed", "lease.expired", "lease.acquired", "lease.released", "lease.acquired",
			"run.superseded", "run.started", "lease.moved", "lease.renewed"}
		if diff := cmp.Diff(want, eventKinds(h.events(a.id, 2))); diff != "" {
			t.Errorf("log (-want +got):\n%s", diff)
		}
	})
}

// TestRenewLeaseDefaultTTL: a renewal without ttl_seconds extends the lease
// by its last term from now, every time: an agent that renews on a timer
// keeps a lease of constant length, and never runs into the TTL cap. The
// last term is the one of the last grant or renewal, not the original one
// (docs/leases.md, docs/agent-loop.md): after a renewal for 10m, a
// renewal without ttl_seconds is for 10m again.
func TestRenewLeaseDefaultTTL(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newLeaseHarness(t, b)
		a := h.session()
		l := h.acquire(a, issue(1), 3600)
		path := "/v1/leases/" + l["id"].(string) + "/renew"
		for i := 1; i <= 30; i++ {
			h.clock.Advance(30 * time.Minute)
			r := h.do("POST", path, h.agent, map[string]any{"run_id": a.run})
			if r.status != 200 {
				t.Fatalf("default renewal %d: %d %s", i, r.status, r.raw)
			}
			want := h.clock.Now().Add(time.Hour)
			if got := at(t, r.get("lease", "expires_at")); !got.Equal(want) {
				t.Fatalf("default renewal %d: expires_at %v, want now + the original 1h term = %v", i, got, want)
			}
		}
		h.clock.Advance(time.Minute)
		r := h.do("POST", path, h.agent, map[string]any{"run_id": a.run, "ttl_seconds": 600}).expect(t, 200, "")
		if got, want := at(t, r.get("lease", "expires_at")), h.clock.Now().Add(10*time.Minute); !got.Equal(want) {
			t.Fatalf("renewal for 600s: expires_at %v, want %v", got, want)
		}
		h.clock.Advance(time.Minute)
		r = h.do("POST", path, h.agent, map[string]any{"run_id": a.run}).expect(t, 200, "")
		if got, want := at(t, r.get("lease", "expires_at")), h.clock.Now().Add(10*time.Minute); !got.Equal(want) {
			t.Errorf("default renewal after one for 600s: expires_at %v, want now + the last 10m term = %v (the original term was 1h)", got, want)
		}
		if got := r.num("lease", "ttl_seconds"); got != 600 {
			t.Errorf("ttl_seconds %d after a renewal for 600s, want 600", got)
		}
	})
}

// TestReleaseLease: 204 for the holder naming its run, and for an operator
// force-releasing without one; 422 for an agent without run_id; 409
// lease_lost for a wrong or superseded run, a second release and after
// expiry; 404, 403, 401.
func TestReleaseLease(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newLeaseHarness(t, b)
		a, other := h.session(), h.session()
		l1 := h.acquire(a, issue(1), 60)["id"].(string)
		l2 := h.acquire(a, issue(2), 60)["id"].(string)
		l3 := h.acquire(a, issue(3), 60)["id"].(string)

		fr := h.do("POST", "/v1/sessions", h.operator, map[string]any{"repo": "other/thing", "role": "author"}).expect(t, 201, "")
		foreign := apiSession{fr.str("session", "id"), fr.str("run", "id"), 1}
		fl := h.do("POST", "/v1/leases", h.operator, leaseReq(foreign, map[string]any{"kind": "issue", "repo": "other/thing", "number": 1}, 60)).expect(t, 201, "")
		foreignID := fl.str("lease", "id")

		cases := []struct {
			name   string
			token  string
			path   string
			status int
			code   string
		}{
			{"agent without run_id", h.agent, "/v1/leases/" + l1, 422, "invalid_request"},
			{"agent with a malformed run_id", h.agent, "/v1/leases/" + l1 + "?run_id=no%20such", 422, "invalid_request"},
			{"agent with another session's run", h.agent, "/v1/leases/" + l1 + "?run_id=" + other.run, 409, "lease_lost"},
			{"operator naming a wrong run", h.operator, "/v1/leases/" + l1 + "?run_id=" + other.run, 409, "lease_lost"},
			{"unknown lease", h.agent, "/v1/leases/lse_00000000000000000000000000000000?run_id=" + a.run, 404, "not_found"},
			{"unknown lease, operator", h.operator, "/v1/leases/lse_00000000000000000000000000000000", 404, "not_found"},
			{"lease out of the token's scope", h.agent, "/v1/leases/" + foreignID + "?run_id=" + foreign.run, 403, "forbidden"},
			{"reader", h.reader, "/v1/leases/" + l1 + "?run_id=" + a.run, 403, "forbidden"},
			{"no token", "", "/v1/leases/" + l1 + "?run_id=" + a.run, 401, "unauthorized"},
		}
		before := h.state(a.id, other.id, foreign.id)
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				h.do("DELETE", c.path, c.token, nil).expect(t, c.status, c.code)
				if after := h.state(a.id, other.id, foreign.id); after != before {
					t.Errorf("a %d changed state:\n%s→\n%s", c.status, before, after)
				}
			})
		}

		mark := len(h.events(a.id, 0))
		r := h.do("DELETE", "/v1/leases/"+l1+"?run_id="+a.run, h.agent, nil).expect(t, 204, "")
		if len(r.raw) != 0 {
			t.Errorf("204 with a body: %s", r.raw)
		}
		h.do("DELETE", "/v1/leases/"+l1+"?run_id="+a.run, h.agent, nil).expect(t, 409, "lease_lost")
		h.do("DELETE", "/v1/leases/"+l2, h.operator, nil).expect(t, 204, "")
		h.do("DELETE", "/v1/leases/"+l2, h.operator, nil).expect(t, 409, "lease_lost")
		h.do("DELETE", "/v1/leases/"+l2+"?run_id="+a.run, h.agent, nil).expect(t, 409, "lease_lost")
		h.do("DELETE", "/v1/leases/"+foreignID, h.operator, nil).expect(t, 204, "")

		evs := h.events(a.id, mark)
		var got []string
		for _, e := range evs {
			d := e["data"].(map[string]any)
			got = append(got, fmt.Sprintf("%s %s %s", e["kind"], d["lease_id"], d["cause"]))
		}
		want := []string{"lease.released " + l1 + " released", "lease.released " + l2 + " force_released"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("log (-want +got):\n%s", diff)
		}
		// Freed resources pass on with the next token.
		if tok := h.acquire(other, issue(1), 60)["fencing_token"]; tok != float64(2) {
			t.Errorf("re-grant token %v, want 2", tok)
		}

		// Past its expiry the holder cannot release it; an operator still can.
		h.clock.Advance(time.Minute)
		before = h.state(a.id)
		h.do("DELETE", "/v1/leases/"+l3+"?run_id="+a.run, h.agent, nil).expect(t, 409, "lease_lost")
		if after := h.state(a.id); after != before {
			t.Errorf("a late release changed state:\n%s→\n%s", before, after)
		}
		// A superseded run cannot release what moved to its successor.
		l4 := h.acquire(a, issue(4), 600)["id"].(string)
		h.do("POST", "/v1/sessions/"+a.id+"/runs", h.agent, map[string]any{"takeover": true}).expect(t, 201, "")
		h.do("DELETE", "/v1/leases/"+l4+"?run_id="+a.run, h.agent, nil).expect(t, 409, "lease_lost")
	})
}

// TestListLeasesAPI: GET /v1/leases filters by repo, resource (issue, pr or
// branch), kind, session and state, pages with a cursor, and shows a token
// only the repos its scope covers.
func TestListLeasesAPI(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newLeaseHarness(t, b)
		a, c := h.session(), h.session()
		names := map[string]string{}
		grant := func(name string, s apiSession, res map[string]any) string {
			id := h.acquire(s, res, 60)["id"].(string)
			names[id] = name
			return id
		}
		i1 := grant("i1", a, issue(1))
		grant("p1", a, map[string]any{"kind": "pr", "repo": "acme/widgets", "number": 1})
		grant("b1", c, map[string]any{"kind": "branch", "repo": "acme/widgets", "branch": "feature/x y"})
		h.do("DELETE", "/v1/leases/"+i1+"?run_id="+a.run, h.agent, nil).expect(t, 204, "")
		grant("i1b", c, issue(1))
		fr := h.do("POST", "/v1/sessions", h.operator, map[string]any{"repo": "other/thing", "role": "author"}).expect(t, 201, "")
		ol := h.do("POST", "/v1/leases", h.operator, map[string]any{"resource": map[string]any{"kind": "issue", "repo": "other/thing", "number": 1},
			"session_id": fr.str("session", "id"), "run_id": fr.str("run", "id"), "ttl_seconds": 60}).expect(t, 201, "")
		names[ol.str("lease", "id")] = "o1"

		list := func(token, query string) ([]string, response) {
			t.Helper()
			r := h.do("GET", "/v1/leases"+query, token, nil).expect(t, 200, "")
			out := []string{}
			for _, it := range r.get("items").([]any) {
				out = append(out, names[it.(map[string]any)["id"].(string)])
			}
			return out, r
		}
		cases := []struct {
			name, query string
			token       string
			want        []string
		}{
			{"operator sees every repo", "", h.operator, []string{"o1", "i1b", "b1", "p1", "i1"}},
			{"agent sees its scope", "", h.agent, []string{"i1b", "b1", "p1", "i1"}},
			{"reader of another scope", "", h.token(checkpointd.RoleReader, []string{"other/*"}), []string{"o1"}},
			{"reader of no repo", "", h.token(checkpointd.RoleReader, []string{"nobody/x"}), []string{}},
			{"repo, other case", "?repo=ACME/Widgets", h.operator, []string{"i1b", "b1", "p1", "i1"}},
			{"repo outside the scope", "?repo=other/thing", h.reader, []string{}},
			{"issue resource", "?kind=issue&repo=acme/widgets&number=1", h.reader, []string{"i1b", "i1"}},
			{"pr resource", "?kind=pr&repo=acme/widgets&number=1", h.reader, []string{"p1"}},
			{"branch resource", "?kind=branch&repo=acme/widgets&branch=feature%2Fx%20y", h.reader, []string{"b1"}},
			{"kind", "?kind=branch", h.reader, []string{"b1"}},
			{"session", "?session_id=" + a.id, h.reader, []string{"p1", "i1"}},
			{"state", "?state=held", h.reader, []string{"i1b", "b1", "p1"}},
			{"released", "?state=released&repo=acme/widgets", h.reader, []string{"i1"}},
			{"session and state", "?session_id=" + a.id + "&state=held", h.reader, []string{"p1"}},
			{"unknown session", "?session_id=ses_00000000000000000000000000000000", h.reader, []string{}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				got, _ := list(tc.token, tc.query)
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			})
		}

		// Items carry the lease; pages of two walk the list once.
		_, r := list(h.reader, "?limit=1")
		item := r.get("items").([]any)[0].(map[string]any)
		for _, k := range []string{"id", "resource", "holder", "fencing_token", "state", "acquired_at", "expires_at"} {
			if _, ok := item[k]; !ok {
				t.Errorf("list item without %s: %v", k, item)
			}
		}
		var paged []string
		query := "?limit=2"
		for range 10 {
			page, r := list(h.operator, query)
			paged = append(paged, page...)
			cur := r.str("next_cursor")
			if cur == "" {
				break
			}
			query = "?limit=2&cursor=" + cur
		}
		if diff := cmp.Diff([]string{"o1", "i1b", "b1", "p1", "i1"}, paged); diff != "" {
			t.Errorf("paged (-want +got):\n%s", diff)
		}
		if got, r := list(h.operator, "?limit=5"); len(got) != 5 || r.get("next_cursor") == nil {
			t.Errorf("a full page of 5 has next_cursor %v", r.get("next_cursor"))
		}
		if _, r := list(h.operator, "?limit=6"); r.get("next_cursor") != nil {
			t.Errorf("a short page has next_cursor %v", r.get("next_cursor"))
		}
		if _, r := list(h.operator, "?limit=100000"); len(r.get("items").([]any)) != 5 {
			t.Errorf("limit above the cap: %s", r.raw)
		}

		for _, q := range []string{"?kind=commit", "?state=lost", "?repo=nope", "?limit=0", "?limit=x", "?cursor=%21",
			"?session_id=not%20an%20id", "?number=1", "?kind=issue&repo=acme/widgets&number=x", "?kind=issue&repo=acme/widgets&number=0",
			"?kind=issue&number=1", "?kind=branch&repo=acme/widgets&branch=x&number=1", "?kind=issue&repo=acme/widgets&branch=x"} {
			h.do("GET", "/v1/leases"+q, h.reader, nil).expect(t, 422, "invalid_request")
		}
		h.do("GET", "/v1/leases", "", nil).expect(t, 401, "unauthorized")
	})
}

// TestLeaseExpiryValidityAPI: expiry by the worker flips a session whose
// latest checkpoint names the lease to lease_lost — in the session, the
// checkpoint and the resume verdict, with the evidence in the event log —
// and a re-acquire plus a checkpoint naming the new grant clears it. With
// no live head observed yet the verdict is then unverified, not valid.
func TestLeaseExpiryValidityAPI(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newLeaseHarness(t, b)
		a, bystander := h.session(), h.session()
		path := "/v1/sessions/" + a.id
		l := h.acquire(a, issue(12), 60)
		id := l["id"].(string)
		h.acquire(bystander, issue(13), 60)
		names := func(tok any, ids ...string) func(map[string]any) {
			return func(d map[string]any) {
				var ls []any
				for _, id := range ids {
					ls = append(ls, map[string]any{"lease_id": id, "fencing_token": tok})
				}
				d["leases"] = ls
			}
		}
		wrong := h.do("POST", path+"/checkpoints", h.agent, checkpointDoc(a.run, a.tok, names(7, id))).expect(t, 201, "")
		if fmt.Sprint(wrong.get("checkpoint", "missing")) != "[lease:"+id+"]" || wrong.get("checkpoint", "complete") != false {
			t.Errorf("a checkpoint naming the wrong token: %s", wrong.raw)
		}
		w := h.do("POST", path+"/checkpoints", h.agent, checkpointDoc(a.run, a.tok, names(1, id))).expect(t, 201, "")
		if w.get("checkpoint", "complete") != true || w.str("checkpoint", "validity") != "unverified" {
			t.Fatalf("a checkpoint naming the held lease: %s", w.raw)
		}
		h.do("POST", "/v1/sessions/"+bystander.id+"/checkpoints", h.agent, checkpointDoc(bystander.run, bystander.tok)).expect(t, 201, "")
		mark := len(h.events(a.id, 0))

		h.clock.Advance(time.Minute)
		if n, err := h.store.ExpireLeases(t.Context(), 100); err != nil || n != 2 {
			t.Fatalf("ExpireLeases: %d, %v; want 2", n, err)
		}
		s := h.do("GET", path, h.reader, nil).expect(t, 200, "")
		if s.str("session", "validity") != "lease_lost" || s.str("session", "validity_reason") == "" {
			t.Errorf("session after expiry: %s", s.raw)
		}
		if v := h.do("GET", "/v1/sessions/"+bystander.id, h.reader, nil).expect(t, 200, "").str("session", "validity"); v != "unverified" {
			t.Errorf("a session whose checkpoint names no lease became %s", v)
		}
		if v := h.do("GET", path+"/checkpoints/latest", h.reader, nil).expect(t, 200, "").str("checkpoint", "validity"); v != "lease_lost" {
			t.Errorf("latest checkpoint validity %s, want lease_lost", v)
		}
		res := h.do("GET", path+"/resume", h.agent, nil).expect(t, 200, "")
		if res.get("resumable") != false || res.str("validity") != "lease_lost" {
			t.Errorf("resume after expiry: %s", res.raw)
		}
		if reasons := fmt.Sprint(res.get("reasons")); !strings.HasPrefix(reasons, "[lease_lost") {
			t.Errorf("resume reasons %s, want lease_lost first", reasons)
		}
		evs := h.events(a.id, mark)
		if diff := cmp.Diff([]string{"lease.expired", "validity.changed"}, eventKinds(evs)); diff != "" {
			t.Fatalf("log after expiry (-want +got):\n%s", diff)
		}
		ev := evs[1]["data"].(map[string]any)
		if ev["from"] != "unverified" || ev["to"] != "lease_lost" || ev["lease_id"] != id || ev["cause"] != "expired" {
			t.Errorf("validity.changed evidence %v, want unverified→lease_lost with lease_id %s cause expired", ev, id)
		}
		if d := evs[0]["data"].(map[string]any); d["lease_id"] != id || d["fencing_token"] != float64(1) || d["cause"] != "expired" {
			t.Errorf("lease.expired data %v", d)
		}

		// Re-acquire; a checkpoint naming the new grant clears lease_lost.
		again := h.acquire(a, issue(12), 60)
		if again["fencing_token"] != float64(2) {
			t.Errorf("re-acquired token %v, want 2", again["fencing_token"])
		}
		mark = len(h.events(a.id, 0))
		w = h.do("POST", path+"/checkpoints", h.agent, checkpointDoc(a.run, a.tok, names(2, again["id"].(string)))).expect(t, 201, "")
		if w.get("checkpoint", "complete") != true || w.str("checkpoint", "validity") != "unverified" {
			t.Errorf("a checkpoint naming the new grant: %s", w.raw)
		}
		res = h.do("GET", path+"/resume", h.agent, nil).expect(t, 200, "")
		if res.get("resumable") != false || res.str("validity") != "unverified" {
			t.Errorf("resume after re-acquire: %s; want unverified (no live head yet), not valid", res.raw)
		}
		if reasons := fmt.Sprint(res.get("reasons")); strings.Contains(reasons, "lease_lost") || !strings.Contains(reasons, "unverified") {
			t.Errorf("resume reasons %s", reasons)
		}
		evs = h.events(a.id, mark)
		if diff := cmp.Diff([]string{"checkpoint.written", "validity.changed"}, eventKinds(evs)); diff != "" {
			t.Fatalf("log of the clearing checkpoint (-want +got):\n%s", diff)
		}
		if ev := evs[1]["data"].(map[string]any); ev["from"] != "lease_lost" || ev["to"] != "unverified" {
			t.Errorf("validity.changed %v, want lease_lost→unverified", ev)
		}
	})
}

// TestTakeoverAndEndMoveLeasesAPI: a takeover moves the session's leases to
// the new run with new tokens, fencing off the old run; ending the session
// releases them and frees the resources.
func TestTakeoverAndEndMoveLeasesAPI(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newLeaseHarness(t, b)
		a, other := h.session(), h.session()
		l := h.acquire(a, map[string]any{"kind": "branch", "repo": "acme/widgets", "branch": "fix-12"}, 600)
		id := l["id"].(string)
		tk := h.do("POST", "/v1/sessions/"+a.id+"/runs", h.agent, map[string]any{"takeover": true, "reason": "crash"}).expect(t, 201, "")
		run2 := tk.str("run", "id")
		list := h.do("GET", "/v1/leases?session_id="+a.id, h.reader, nil).expect(t, 200, "")
		moved := list.get("items").([]any)[0].(map[string]any)
		holder := moved["holder"].(map[string]any)
		if moved["id"] != id || holder["run_id"] != run2 || moved["fencing_token"] != float64(2) || moved["state"] != "held" {
			t.Fatalf("lease after takeover: %v", moved)
		}
		h.do("POST", "/v1/leases/"+id+"/renew", h.agent, map[string]any{"run_id": a.run}).expect(t, 409, "lease_lost")
		h.do("DELETE", "/v1/leases/"+id+"?run_id="+a.run, h.agent, nil).expect(t, 409, "lease_lost")
		h.do("POST", "/v1/leases", h.agent, leaseReq(a, issue(5), 60)).expect(t, 409, "run_superseded")
		h.do("POST", "/v1/leases/"+id+"/renew", h.agent, map[string]any{"run_id": run2, "ttl_seconds": 600}).expect(t, 200, "")
		h.do("POST", "/v1/leases", h.agent, leaseReq(other, map[string]any{"kind": "branch", "repo": "acme/widgets", "branch": "fix-12"}, 60)).
			expect(t, 409, "lease_held")

		h.do("POST", "/v1/sessions/"+a.id+"/end", h.agent, map[string]any{"run_id": run2, "outcome": "completed"}).expect(t, 200, "")
		held := h.do("GET", "/v1/leases?state=held&session_id="+a.id, h.reader, nil).expect(t, 200, "")
		if n := len(held.get("items").([]any)); n != 0 {
			t.Errorf("an ended session holds %d leases", n)
		}
		next := h.acquire(other, map[string]any{"kind": "branch", "repo": "acme/widgets", "branch": "fix-12"}, 60)
		if next["fencing_token"] != float64(3) {
			t.Errorf("token after takeover and end: %v, want 3", next["fencing_token"])
		}
		h.do("POST", "/v1/leases", h.agent, leaseReq(apiSession{a.id, run2, 2}, issue(5), 60)).expect(t, 409, "session_ended")
		want := []string{"session.created", "run.started", "lease.acquired", "run.superseded", "run.started", "lease.moved",
			"lease.renewed", "session.ended", "lease.released"}
		if diff := cmp.Diff(want, eventKinds(h.events(a.id, 0))); diff != "" {
			t.Errorf("log (-want +got):\n%s", diff)
		}
		if !slices.Contains(eventKinds(h.events(other.id, 0)), "lease.acquired") {
			t.Errorf("the new holder's log has no lease.acquired")
		}
	})
}
