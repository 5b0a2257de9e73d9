package api_test

import (
	"net/http"
	"sort"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/api"
	"github.com/checkpointd/checkpointd/reconcile"
	"github.com/checkpointd/checkpointd/reconcile/forgetest"
	"github.com/checkpointd/checkpointd/store/storetest"
)

const liveHead = "0123456789abcdef0123456789abcdef01234567" // checkpointDoc's head

// reconcileHarness is the harness with a reconciler asking a fake forge.
func reconcileHarness(t *testing.T, b storetest.Backend) (*harness, *forgetest.Server) {
	t.Helper()
	h := newHarness(t, b)
	f := forgetest.New(t)
	rec := &reconcile.Reconciler{Store: h.store, Forge: reconcile.Gitea(f.URL, "", 0), ForgeURL: f.URL,
		CallTimeout: 5 * time.Second, Backoff: func(int, time.Duration) time.Duration { return time.Millisecond }}
	h.handler = api.New(api.Deps{Store: api.StoresOf(h.store), Workflow: checkpointd.DefaultWorkflow(), DigestKey: testDigestKey, Reconciler: rec})
	return h, f
}

// TestReconcileAPI: before any pass the last report is null; POST
// /v1/reconcile runs a pass and answers its report; the session it
// confirmed is resumable; GET /v1/reconcile/last serves the same report.
func TestReconcileAPI(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h, f := reconcileHarness(t, b)
		if r := h.do("GET", "/v1/reconcile/last", h.reader, nil).expect(t, 200, ""); r.get("report") != nil {
			t.Fatalf("last report before any pass: %s", r.raw)
		}
		f.AddRepo(1, "acme/widgets")
		f.SetBranch("acme/widgets", "fix-12", liveHead)
		id, run, tok := h.newSession()
		h.do("POST", "/v1/sessions/"+id+"/checkpoints", h.agent, checkpointDoc(run, tok)).expect(t, 201, "")
		if r := h.do("GET", "/v1/sessions/"+id+"/resume", h.agent, nil).expect(t, 200, ""); r.get("resumable") != false {
			t.Fatalf("resumable before reconcile: %s", r.raw)
		}

		r := h.do("POST", "/v1/reconcile", h.operator, nil).expect(t, 200, "")
		if r.num("report", "sessions_checked") != 1 || r.num("report", "forge_calls") != 1 ||
			r.num("report", "verdicts", "valid") != 1 || r.str("report", "trigger") != reconcile.TriggerAPI {
			t.Errorf("report %s", r.raw)
		}
		if res := h.do("GET", "/v1/sessions/"+id+"/resume", h.agent, nil).expect(t, 200, ""); res.get("resumable") != true ||
			res.str("live", "source") != "reconcile:"+r.str("report", "id") {
			t.Errorf("resume after reconcile: %s", res.raw)
		}
		last := h.do("GET", "/v1/reconcile/last", h.reader, nil).expect(t, 200, "")
		if last.str("report", "id") != r.str("report", "id") || last.num("report", "verdicts", "valid") != 1 {
			t.Errorf("last report %s, want %s", last.raw, r.raw)
		}
		h.do("POST", "/v1/reconcile", h.agent, nil).expect(t, 403, "forbidden")
	})
}

// TestLastReportScoped: a reader scoped to one repo sees the counts of the
// whole pass but the errors and unverified sessions of its repo only.
func TestLastReportScoped(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h, _ := reconcileHarness(t, b)
		for _, repo := range []string{"acme/widgets", "other/secret"} {
			h.do("POST", "/v1/sessions", h.operator, map[string]any{"repo": repo, "role": "author", "branch": "main"}).expect(t, 201, "")
		}
		// The fake forge knows neither repository: both refs fail.
		h.do("POST", "/v1/reconcile", h.operator, nil).expect(t, 200, "")
		repos := func(r response, field string) []string {
			var out []string
			switch v := r.get("report", field).(type) {
			case map[string]any:
				for k := range v {
					out = append(out, k)
				}
			case []any:
				for _, it := range v {
					out = append(out, it.(map[string]any)["repo"].(string))
				}
			}
			sort.Strings(out)
			return out
		}
		all := h.do("GET", "/v1/reconcile/last", h.operator, nil).expect(t, 200, "")
		scoped := h.do("GET", "/v1/reconcile/last", h.reader, nil).expect(t, 200, "")
		for _, field := range []string{"errors_by_repo", "not_valid"} {
			if got := repos(all, field); len(got) != 2 {
				t.Errorf("operator %s: %v, want both repos", field, got)
			}
			if got := repos(scoped, field); len(got) != 1 || got[0] != "acme/widgets" {
				t.Errorf("reader scoped to acme/widgets, %s: %v", field, got)
			}
		}
		if scoped.num("report", "verdicts", "unverified") != 2 || scoped.num("report", "sessions_checked") != 2 {
			t.Errorf("scoped counts %s, want the whole pass's", scoped.raw)
		}
	})
}

// TestSlowForgeDoesNotBlockRequests: while a pass waits on a forge that
// does not answer, /readyz and the rest of the API answer at once.
func TestSlowForgeDoesNotBlockRequests(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h, f := reconcileHarness(t, b)
		f.AddRepo(1, "acme/widgets")
		f.SetBranch("acme/widgets", "fix-12", liveHead)
		id, run, tok := h.newSession()
		arrived, release := make(chan struct{}, 1), make(chan struct{})
		f.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
			arrived <- struct{}{}
			<-release
			return false
		})
		done := make(chan response)
		go func() { done <- h.do("POST", "/v1/reconcile", h.operator, nil) }()
		<-arrived
		start := time.Now()
		h.do("GET", "/readyz", "", nil).expect(t, 200, "")
		h.do("POST", "/v1/sessions/"+id+"/checkpoints", h.agent, checkpointDoc(run, tok)).expect(t, 201, "")
		h.newSession()
		h.do("GET", "/v1/reconcile/last", h.reader, nil).expect(t, 200, "")
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("requests took %v while the forge hung", d)
		}
		close(release)
		if r := <-done; r.status != 200 {
			t.Errorf("reconcile after the forge answered: %d %s", r.status, r.raw)
		}
	})
}
