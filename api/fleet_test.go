package api_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/api"
	"github.com/checkpointd/checkpointd/metrics"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// fleet is a known fleet written over the API at leaseT0:
//   - blocked (acme/widgets): stage blocked, waiting on and next actor
//     operator, a PR lease; unresponsive by the end;
//   - review (acme/gadgets): review_requested, waiting on reviewer; live;
//   - elsewhere (other/widgets): implementing; unresponsive;
//   - parked (acme/widgets): parked by the operator, no checkpoint.
type fleet struct {
	*leaseHarness
	other                              string // agent token for other/*
	blocked, review, elsewhere, parked apiSession
	lease                              map[string]any
}

func (h *leaseHarness) sessionOn(token, repo string) apiSession {
	h.t.Helper()
	body := map[string]any{}
	for k, v := range sessionBody {
		body[k] = v
	}
	body["repo"] = repo
	r := h.do("POST", "/v1/sessions", token, body).expect(h.t, 201, "")
	return apiSession{r.str("session", "id"), r.str("run", "id"), r.num("run", "fencing_token")}
}

func (h *leaseHarness) fleetCheckpoint(token, repo string, s apiSession, stage, waitingOn, actor string) {
	h.t.Helper()
	h.do("POST", "/v1/sessions/"+s.id+"/checkpoints", token, checkpointDoc(s.run, s.tok, func(d map[string]any) {
		d["stage"] = stage
		d["target"] = map[string]any{"repo": repo, "issue": 12}
		d["next_action"] = map[string]any{"actor": actor, "action": "decide"}
		if waitingOn != "" {
			d["blocker"] = map[string]any{"kind": "decision", "summary": "which way", "waiting_on": waitingOn}
		}
	})).expect(h.t, 201, "")
}

func newFleet(t *testing.T, h *leaseHarness) *fleet {
	f := &fleet{leaseHarness: h, other: h.token(checkpointd.RoleAgent, []string{"other/*"})}
	f.blocked = h.sessionOn(h.agent, "acme/widgets")
	f.lease = h.acquire(f.blocked, map[string]any{"kind": "pr", "repo": "acme/widgets", "number": 34}, 3600)
	h.fleetCheckpoint(h.agent, "acme/widgets", f.blocked, "blocked", "operator", "operator")
	f.review = h.sessionOn(h.agent, "acme/gadgets")
	h.fleetCheckpoint(h.agent, "acme/gadgets", f.review, "review_requested", "reviewer", "reviewer")
	f.elsewhere = h.sessionOn(f.other, "other/widgets")
	h.fleetCheckpoint(f.other, "other/widgets", f.elsewhere, "implementing", "", "author")
	f.parked = h.sessionOn(h.agent, "acme/widgets")
	h.clock.Advance(checkpointd.DefaultRunLiveness - time.Minute)
	h.fleetCheckpoint(h.agent, "acme/gadgets", f.review, "review_requested", "reviewer", "reviewer")
	h.do("POST", "/v1/sessions/"+f.parked.id+"/park", h.operator, map[string]any{"reason": "host down"}).expect(t, 200, "")
	h.clock.Advance(time.Minute) // the t0 runs are unresponsive now
	return f
}

func (h *leaseHarness) listed(token, query string) []string {
	h.t.Helper()
	r := h.do("GET", "/v1/sessions?"+query, token, nil).expect(h.t, 200, "")
	ids := []string{}
	for _, it := range r.get("items").([]any) {
		ids = append(ids, it.(map[string]any)["id"].(string))
	}
	return ids
}

// TestFleetSummary: a session read and its list item carry what an
// operator scans a fleet by: agent and instance, liveness, the latest
// checkpoint's stage, waiting_on and next_actor, the leases held.
func TestFleetSummary(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		f := newFleet(t, newLeaseHarness(t, b))
		one := f.do("GET", "/v1/sessions/"+f.blocked.id, f.reader, nil).expect(t, 200, "").get("session").(map[string]any)
		var item map[string]any
		for _, it := range f.do("GET", "/v1/sessions?stage=blocked&repo=acme/widgets", f.reader, nil).expect(t, 200, "").get("items").([]any) {
			item = it.(map[string]any)
		}
		for name, s := range map[string]map[string]any{"read": one, "list item": item} {
			r := response{body: s}
			got := []any{r.get("current_run", "agent", "instance"), r.get("current_run", "live"),
				r.get("latest_checkpoint", "stage"), r.get("latest_checkpoint", "waiting_on"), r.get("latest_checkpoint", "next_actor"),
				r.get("validity"), r.get("validity_reason") != nil}
			want := []any{"host-7/pid-1", false, "blocked", "operator", "operator", "unverified", true}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s (-want +got):\n%s", name, diff)
			}
			leases, _ := s["leases"].([]any)
			wantLease := []any{map[string]any{"id": f.lease["id"], "resource": f.lease["resource"],
				"fencing_token": f.lease["fencing_token"], "expires_at": f.lease["expires_at"]}}
			if diff := cmp.Diff(wantLease, leases); diff != "" {
				t.Errorf("%s leases (-want +got):\n%s", name, diff)
			}
		}
		parked := f.do("GET", "/v1/sessions/"+f.parked.id, f.operator, nil).expect(t, 200, "")
		if l, ok := parked.get("session", "leases").([]any); !ok || len(l) != 0 || parked.get("session", "parked") != true {
			t.Errorf("parked session: %s", parked.raw)
		}
	})
}

// TestFleetFilters: every filter over HTTP, the activity sort's paging,
// and the token's scope on top of an owner/* filter.
func TestFleetFilters(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		f := newFleet(t, newLeaseHarness(t, b))
		bl, rv, el, pk := f.blocked.id, f.review.id, f.elsewhere.id, f.parked.id
		for _, c := range []struct {
			token, query string
			want         []string
		}{
			{f.operator, "", []string{pk, el, rv, bl}},
			{f.operator, "repo=acme/*", []string{pk, rv, bl}},
			{f.operator, "repo=Other/*", []string{el}},
			{f.operator, "repo=acme/gadgets", []string{rv}},
			{f.operator, "stage=blocked", []string{bl}},
			{f.operator, "stage=implementing&repo=acme/*", []string{}},
			{f.operator, "waiting_on=reviewer", []string{rv}},
			{f.operator, "waiting_on=operator&stage=blocked", []string{bl}},
			{f.operator, "live=true", []string{rv}},
			{f.operator, "live=false", []string{el, bl}},
			// review was heard from last (t0+9m); parking hears from no
			// run, so the rest tie at t0, newest first.
			{f.operator, "state=active&sort=activity", []string{rv, pk, el, bl}},
			{f.operator, "sort=created&validity=unverified", []string{pk, el, rv, bl}},
			// The reader sees acme/widgets only, whatever the filter asks.
			{f.reader, "repo=acme/*", []string{pk, bl}},
			{f.reader, "repo=other/*", []string{}},
			{f.reader, "live=false", []string{bl}},
			{f.reader, "waiting_on=reviewer", []string{}},
		} {
			if diff := cmp.Diff(c.want, f.listed(c.token, c.query)); diff != "" {
				t.Errorf("%s (-want +got):\n%s", c.query, diff)
			}
		}
		// An activity walk pages with its own cursor, through the ties too.
		var walked []string
		q := "state=active&sort=activity&limit=1"
		for range 10 {
			r := f.do("GET", "/v1/sessions?"+q, f.operator, nil).expect(t, 200, "")
			for _, it := range r.get("items").([]any) {
				walked = append(walked, it.(map[string]any)["id"].(string))
			}
			next, _ := r.get("next_cursor").(string)
			if next == "" {
				break
			}
			q = "state=active&sort=activity&limit=1&cursor=" + url.QueryEscape(next)
			if len(walked) == 1 {
				// The cursor of one order is refused by the other.
				f.do("GET", "/v1/sessions?limit=1&cursor="+url.QueryEscape(next), f.operator, nil).expect(t, 422, "invalid_request")
			}
		}
		if diff := cmp.Diff(f.listed(f.operator, "state=active&sort=activity"), walked); diff != "" {
			t.Errorf("activity walk by pages of 1 (-want +got):\n%s", diff)
		}
	})
}

// TestFleetFilterRefusals: a bad filter value is a 422 invalid_request
// naming the parameter; an unconfigured stage lists the configured ones,
// and no value that looks like a secret is echoed.
func TestFleetFilterRefusals(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newLeaseHarness(t, b)
		for _, c := range []struct{ query, path, says string }{
			{"repo=acme", "repo", "owner/*"},
			{"repo=acme/*/x", "repo", "owner/name"},
			{"repo=*/*", "repo", "owner/name"},
			{"stage=shipping", "stage", `stage "shipping" is not configured; configured stages: planned, implementing`},
			{"stage=ghp_abcdefghijklmnopqrstuvwxyz0123456789AB", "stage", "stage is not configured"},
			{"waiting_on=The+Operator", "waiting_on", "must be a name"},
			{"waiting_on=" + strings.Repeat("a", 65), "waiting_on", "must be a name"},
			{"live=yes", "live", "true or false"},
			{"sort=oldest", "sort", "created or activity"},
			{"validity=fresh", "validity", "must be"},
		} {
			r := h.do("GET", "/v1/sessions?"+c.query, h.operator, nil).expect(t, 422, "invalid_request")
			if diff := cmp.Diff([]string{c.path}, problemPaths(r)); diff != "" {
				t.Errorf("%s: problem paths (-want +got):\n%s", c.query, diff)
			}
			msg := ""
			if ps, _ := r.get("problems").([]any); len(ps) == 1 {
				msg, _ = ps[0].(map[string]any)["message"].(string)
			}
			if !strings.Contains(msg, c.says) || strings.Contains(string(r.raw), "ghp_") {
				t.Errorf("%s: %s", c.query, r.raw)
			}
		}
	})
}

// scrapeFleet returns the fleet gauges' lines of one /metrics answer.
func scrapeFleet(t *testing.T, h http.Handler) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("/metrics: %d", rec.Code)
	}
	var lines []string
	for _, l := range strings.Split(rec.Body.String(), "\n") {
		for _, name := range []string{"checkpointd_sessions_active", "checkpointd_leases_held", `checkpointd_store_errors_total{op="read"}`} {
			if strings.HasPrefix(l, name) {
				lines = append(lines, l)
				break
			}
		}
	}
	return strings.Join(lines, "\n")
}

func fleetGauges(unverified, live, unresponsive, parked, leases int) string {
	return fmt.Sprintf(`checkpointd_leases_held %d
checkpointd_sessions_active{validity="invalidated"} 0
checkpointd_sessions_active{validity="lease_lost"} 0
checkpointd_sessions_active{validity="stale"} 0
checkpointd_sessions_active{validity="unverified"} %d
checkpointd_sessions_active{validity="valid"} 0
checkpointd_sessions_active_by_liveness{liveness="live"} %d
checkpointd_sessions_active_by_liveness{liveness="parked"} %d
checkpointd_sessions_active_by_liveness{liveness="unresponsive"} %d
checkpointd_store_errors_total{op="read"} 0`, leases, unverified, live, parked, unresponsive)
}

// TestFleetGauges: the gauges scraped from /metrics after a known fleet;
// within the cache interval a change does not show, past it the numbers
// are the database's again; a store that cannot answer drops the gauges
// (no stale numbers as fresh) and counts the failure.
func TestFleetGauges(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		const ttl = 10 * time.Second
		clock := checkpointd.NewManualClock(leaseT0)
		url := storetest.URL(t, b)
		s := storetest.OpenURL(t, url, clock)
		m := metrics.New()
		s.SetObserver(m)
		m.WatchFleet(s.FleetCounts, ttl, clock)
		h := &harness{t: t, store: s}
		h.handler = api.New(api.Deps{Store: api.StoresOf(s), Workflow: checkpointd.DefaultWorkflow(), DigestKey: testDigestKey,
			MaxDocumentBytes: 8 << 10, Metrics: m, MetricsHandler: m.Handler()})
		h.operator = h.token(checkpointd.RoleOperator, nil)
		h.agent = h.token(checkpointd.RoleAgent, []string{"acme/*"})
		h.reader = h.token(checkpointd.RoleReader, []string{"acme/widgets"})
		f := newFleet(t, &leaseHarness{harness: h, clock: clock})
		// A lease past expires_at is not held, though no worker ran.
		f.acquire(f.review, map[string]any{"kind": "issue", "repo": "acme/gadgets", "number": 7}, 10)
		f.clock.Advance(10 * time.Second)
		if diff := cmp.Diff(fleetGauges(4, 1, 2, 1, 1), scrapeFleet(t, h.handler)); diff != "" {
			t.Errorf("gauges (-want +got):\n%s", diff)
		}
		f.do("POST", "/v1/sessions/"+f.blocked.id+"/end", f.operator, map[string]any{"outcome": "abandoned", "reason": "gone"}).expect(t, 200, "")
		f.clock.Advance(ttl - time.Second)
		if diff := cmp.Diff(fleetGauges(4, 1, 2, 1, 1), scrapeFleet(t, h.handler)); diff != "" {
			t.Errorf("within the cache interval (-want +got):\n%s", diff)
		}
		f.clock.Advance(time.Second)
		if diff := cmp.Diff(fleetGauges(3, 1, 1, 1, 0), scrapeFleet(t, h.handler)); diff != "" {
			t.Errorf("past the cache interval (-want +got):\n%s", diff)
		}

		// Another replica whose store went away reports no fleet gauges.
		down := storetest.OpenURL(t, url, clock)
		dm := metrics.New()
		down.SetObserver(dm)
		dm.WatchFleet(down.FleetCounts, ttl, clock)
		if got := scrapeFleet(t, dm.Handler()); !strings.Contains(got, `checkpointd_sessions_active{validity="unverified"} 3`) {
			t.Fatalf("the second replica before the outage:\n%s", got)
		}
		down.Close()
		clock.Advance(ttl)
		if diff := cmp.Diff(`checkpointd_store_errors_total{op="read"} 1`, scrapeFleet(t, dm.Handler())); diff != "" {
			t.Errorf("store down (-want +got):\n%s", diff)
		}
		// The failure is cached too: a store that is down is asked once
		// per interval, and no gauge comes back meanwhile.
		clock.Advance(ttl - time.Second)
		if diff := cmp.Diff(`checkpointd_store_errors_total{op="read"} 1`, scrapeFleet(t, dm.Handler())); diff != "" {
			t.Errorf("store down, within the interval (-want +got):\n%s", diff)
		}
	})
}

// TestFleetNamesAreCapped: waiting_on and next_actor, kept in the clear on
// the session row, are names of at most 64 bytes: a checkpoint with a
// longer or free-text one is refused, and nothing is stored.
func TestFleetNamesAreCapped(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newLeaseHarness(t, b)
		a := h.session()
		long := strings.Repeat("a", 65)
		for _, c := range []struct {
			name, path string
			mutate     func(map[string]any)
		}{
			{"long waiting_on", "/blocker/waiting_on", func(d map[string]any) {
				d["blocker"] = map[string]any{"kind": "decision", "waiting_on": long}
			}},
			{"free-text waiting_on", "/blocker/waiting_on", func(d map[string]any) {
				d["blocker"] = map[string]any{"kind": "decision", "waiting_on": "the operator, please"}
			}},
			{"long next actor", "/next_action/actor", func(d map[string]any) {
				d["next_action"] = map[string]any{"actor": long, "action": "decide"}
			}},
		} {
			r := h.do("POST", "/v1/sessions/"+a.id+"/checkpoints", h.agent, checkpointDoc(a.run, a.tok, c.mutate)).expect(t, 422, "invalid_checkpoint")
			if !slices.Contains(problemPaths(r), c.path) {
				t.Errorf("%s: problem paths %v, want %s", c.name, problemPaths(r), c.path)
			}
		}
		if got := h.do("GET", "/v1/sessions/"+a.id, h.operator, nil).expect(t, 200, ""); got.get("session", "latest_checkpoint") != nil {
			t.Errorf("a refused checkpoint was stored: %s", got.raw)
		}
	})
}

// TestFleetBranchAndCounts: the branch filter finds the sessions bound to
// a branch; GET /v1/fleet counts the active fleet by validity and liveness
// in one read, for every token that may read.
func TestFleetBranchAndCounts(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		f := newFleet(t, newLeaseHarness(t, b))
		other := map[string]any{}
		for k, v := range sessionBody {
			other[k] = v
		}
		other["branch"] = "feature/other"
		r := f.do("POST", "/v1/sessions", f.agent, other).expect(t, 201, "")
		id := r.str("session", "id")
		if diff := cmp.Diff([]string{id}, f.listed(f.operator, "branch=feature/other")); diff != "" {
			t.Errorf("branch filter (-want +got):\n%s", diff)
		}
		if got := f.listed(f.operator, "branch=nope"); len(got) != 0 {
			t.Errorf("an unknown branch lists %v", got)
		}
		f.do("GET", "/v1/sessions?branch="+url.QueryEscape("a\x00b"), f.operator, nil).expect(t, 422, "invalid_request")

		c := f.do("GET", "/v1/fleet", f.reader, nil).expect(t, 200, "")
		// blocked, review, elsewhere, parked and the new one: all unverified.
		if c.num("total_active") != 5 || c.num("active", "unverified") != 5 || c.num("active", "valid") != 0 ||
			c.num("by_liveness", "parked") != 1 || c.num("by_liveness", "unresponsive") != 2 || c.num("by_liveness", "live") != 2 ||
			c.num("leases_held") != 1 {
			t.Errorf("counts: %s", c.raw)
		}
		f.do("GET", "/v1/fleet", "", nil).expect(t, 401, "unauthorized")
	})
}

// TestSessionsByIssueAndPR: issue and pr find the sessions on that issue
// or pull request of one repo (how a restarted agent finds its session);
// without an exact repo, or with a number that is not one, they are a 422
// naming the parameter; the token's scope still applies.
func TestSessionsByIssueAndPR(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newLeaseHarness(t, b)
		create := func(repo string, issue, pr int) string {
			body := map[string]any{"repo": repo, "role": "author", "agent": sessionBody["agent"]}
			if issue != 0 {
				body["issue"] = issue
			}
			if pr != 0 {
				body["pr"] = pr
			}
			return h.do("POST", "/v1/sessions", h.agent, body).expect(t, 201, "").str("session", "id")
		}
		widgets12 := create("acme/widgets", 12, 0)
		create("acme/gadgets", 12, 0)
		create("acme/widgets", 13, 0)
		widgetsPR := create("acme/widgets", 0, 12)
		widgets12Again := create("Acme/Widgets", 12, 0)

		if diff := cmp.Diff([]string{widgets12Again, widgets12}, h.listed(h.reader, "repo=acme/widgets&issue=12")); diff != "" {
			t.Errorf("repo and issue (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{widgetsPR}, h.listed(h.reader, "repo=ACME/widgets&pr=12")); diff != "" {
			t.Errorf("repo and pr (-want +got):\n%s", diff)
		}
		if got := h.listed(h.reader, "repo=acme/widgets&issue=12&pr=12"); len(got) != 0 {
			t.Errorf("issue and pr together match no session here, got %v", got)
		}
		other := h.token(checkpointd.RoleReader, []string{"other/*"})
		if got := h.listed(other, "repo=acme/widgets&issue=12"); len(got) != 0 {
			t.Errorf("outside the scope: %v", got)
		}
		for _, q := range []string{"issue=12", "repo=acme/*&issue=12", "pr=3", "repo=acme/widgets&issue=0",
			"repo=acme/widgets&issue=-1", "repo=acme/widgets&pr=x", "repo=acme/widgets&issue=99999999999999999999"} {
			r := h.do("GET", "/v1/sessions?"+q, h.reader, nil).expect(t, 422, "invalid_request")
			if !strings.Contains(r.str("detail"), "issue") && !strings.Contains(r.str("detail"), "pr") {
				t.Errorf("%s: the detail names no parameter: %s", q, r.raw)
			}
		}
	})
}
