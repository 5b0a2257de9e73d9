package reconcile_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/reconcile"
	"github.com/checkpointd/checkpointd/reconcile/forgetest"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestForgeFailuresNeverValid: sessions valid after a good pass become
// unverified — never valid — when the forge answers 503, 429, or nothing
// within the call timeout, or cannot be reached; the reason is in the
// report and on the session; one failing ref never stops the others; and
// a checkpoint written meanwhile does not turn valid on the old evidence.
func TestForgeFailuresNeverValid(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		e := newEnv(t, b)
		e.forge.AddRepo(1, "acme/widgets")
		e.forge.SetBranch("acme/widgets", "main", sha(1))
		e.forge.SetPull("acme/widgets", forgetestPull(4, "open", false, "feat", sha(2)))
		onBranch := e.session("acme/widgets", "main", 0, sha(1))
		onPR := e.session("acme/widgets", "", 4, sha(2))
		healthy := func() {
			t.Helper()
			e.forge.Intercept(nil)
			e.pass()
			e.expect(onBranch, checkpointd.ValidityValid, "")
			e.expect(onPR, checkpointd.ValidityValid, "")
		}
		healthy()

		cases := []struct {
			name      string
			intercept func(http.ResponseWriter, *http.Request) bool
			forgeURL  string // replaces the forge's URL (unreachable)
			reason    string
			calls     int // requests for the branch ref
		}{
			{"503", forgetest.Status("/branches/", http.StatusServiceUnavailable, ""),
				"", "the forge answered 503 Service Unavailable (after 3 attempts)", 3},
			{"429", forgetest.Status("/branches/", http.StatusTooManyRequests, "7"),
				"", "the forge answered 429 Too Many Requests (after 3 attempts)", 3},
			{"timeout", hang("/branches/"), "", "did not answer within the call timeout", 1},
			{"unreachable", nil, closedServerURL(t), "the forge is unreachable", 0},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				e.t = t
				e.forge.ResetCalls()
				e.forge.Intercept(c.intercept)
				e.r.CallTimeout = 5 * time.Second
				if c.name == "timeout" {
					e.r.CallTimeout = 100 * time.Millisecond
				}
				e.r.Forge = reconcile.Gitea(e.forge.URL, "", 0)
				if c.forgeURL != "" {
					e.r.Forge = reconcile.Gitea(c.forgeURL, "", 0)
				}
				rep := e.pass()
				e.expect(onBranch, checkpointd.ValidityUnverified, c.reason)
				if errs := rep.ErrorsByRepo["acme/widgets"]; len(errs) == 0 || !strings.Contains(strings.Join(errs, "\n"), c.reason) {
					t.Errorf("errors by repo %v, want %q", rep.ErrorsByRepo, c.reason)
				}
				if c.forgeURL == "" {
					// The PR of the same repo still answered: one bad
					// ref does not stop the pass.
					e.expect(onPR, checkpointd.ValidityValid, "")
					if n := countPaths(e.forge.Paths(), "/branches/"); n != c.calls {
						t.Errorf("%d requests for the branch, want %d", n, c.calls)
					}
				}
				if rep.Verdicts["valid"] > 1 || rep.Changed["unverified"] < 1 {
					t.Errorf("verdicts %v changed %v", rep.Verdicts, rep.Changed)
				}
				// The agent checkpoints the head the forge last confirmed:
				// with the forge failing, that is no evidence now.
				e.checkpoint(e.get(onBranch), sha(1))
				e.expect(onBranch, checkpointd.ValidityUnverified, "")
				e.r.Forge = reconcile.Gitea(e.forge.URL, "", 0)
				healthy()
			})
		}
		e.t = t
		// The 429's Retry-After reached the back-off.
		found := false
		for _, d := range e.backoffs {
			found = found || d == 7*time.Second
		}
		if !found {
			t.Errorf("back-offs were asked for %v; want the 429's Retry-After (7s) among them", e.backoffs)
		}
	})
}

// TestSlowForgeDoesNotBlockTheStore: while a pass waits on a forge that
// does not answer, the store serves reads and writes (no transaction is
// held across forge calls); the pass keeps Concurrency calls in flight,
// no more; and a second pass waits for the first to finish.
func TestSlowForgeDoesNotBlockTheStore(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		e := newEnv(t, b)
		e.forge.AddRepo(1, "acme/widgets")
		var sessions []*checkpointd.Session
		for i := range 5 {
			branch := "b" + string(rune('0'+i))
			e.forge.SetBranch("acme/widgets", branch, sha(i))
			sessions = append(sessions, e.session("acme/widgets", branch, 0, sha(i)))
		}
		arrived, release := make(chan struct{}, 16), make(chan struct{})
		e.forge.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
			arrived <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return false
		})
		done := make(chan *reconcile.Report, 2)
		pass := func() {
			rep, err := e.r.Once(t.Context(), reconcile.TriggerBoot)
			if err != nil {
				t.Errorf("pass: %v", err)
			}
			done <- rep
		}
		go pass()
		for range e.r.Concurrency {
			<-arrived
		}
		start := time.Now()
		if err := e.s.Ready(t.Context()); err != nil {
			t.Fatal(err)
		}
		e.forge.SetBranch("acme/widgets", "other", sha(9))
		other := e.session("acme/widgets", "other", 0, sha(9))
		e.checkpoint(e.get(sessions[0]), sha(0))
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("store calls took %v while the forge hung", d)
		}
		go pass()
		select {
		case <-done:
			t.Fatal("a pass finished while the forge still hung")
		default:
		}
		close(release)
		for range 2 {
			if rep := <-done; rep == nil || rep.Refs < 5 {
				t.Fatalf("pass report %+v", rep)
			}
		}
		if got := e.forge.MaxInFlight(); got != e.r.Concurrency {
			t.Errorf("%d forge calls in flight at most, want the concurrency bound %d", got, e.r.Concurrency)
		}
		e.forge.Intercept(nil)
		e.pass()
		for _, s := range append(sessions, other) {
			e.expect(s, checkpointd.ValidityValid, "")
		}
	})
}

func hang(pathPart string) func(http.ResponseWriter, *http.Request) bool {
	return func(w http.ResponseWriter, r *http.Request) bool {
		if !strings.Contains(r.URL.Path, pathPart) {
			return false
		}
		<-r.Context().Done()
		return true
	}
}

func closedServerURL(t *testing.T) string {
	s := httptest.NewServer(http.NotFoundHandler())
	s.Close()
	return s.URL
}

func countPaths(paths []string, part string) int {
	n := 0
	for _, p := range paths {
		if strings.Contains(p, part) {
			n++
		}
	}
	return n
}
