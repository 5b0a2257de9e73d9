package reconcile_test

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestRefsGoRoundInTurns: a pass with more refs than its time lets it ask
// about (here the forge answers `answered` branches a pass, then stalls
// until the pass stops asking) records what it learned, leaves the refs it
// did not reach as they were — unverified ones unverified, valid ones
// valid, none marked as failing — and the next pass asks the unverified
// ones first, then goes on round the others from where the last stopped,
// so every ref is asked in turn.
func TestRefsGoRoundInTurns(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		e := newEnv(t, b)
		e.r.Concurrency, e.r.PassTimeout, e.r.Attempts = 1, 2500*time.Millisecond, 1 // asks for 2 s
		e.forge.AddRepo(1, "acme/widgets")
		branches := []string{"b1", "b2", "b3", "b4", "b5"}
		sessions := map[string]*checkpointd.Session{}
		for i, br := range branches {
			e.forge.SetBranch("acme/widgets", br, sha(i))
			sessions[br] = e.session("acme/widgets", br, 0, sha(i))
		}
		var mu sync.Mutex
		answered, asked := 0, []string{}
		e.forge.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
			mu.Lock()
			stall := answered == 0
			if !stall {
				answered--
				asked = append(asked, r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:])
			}
			mu.Unlock()
			if stall {
				select { // a forge slower than the pass has time for
				case <-r.Context().Done():
				case <-time.After(5 * time.Second):
				}
				return true
			}
			return false
		})
		pass := func(n int) ([]string, int) {
			t.Helper()
			mu.Lock()
			answered, asked = n, nil
			mu.Unlock()
			rep := e.pass()
			mu.Lock()
			defer mu.Unlock()
			if rep.Refs != 5 || rep.RefsDeferred != 5-len(asked) || len(rep.ErrorsByRepo) != 0 || rep.RefsUnverified != 0 {
				t.Errorf("report: refs %d, deferred %d, unverified %d, errors %v; want 5 refs, %d deferred, no errors",
					rep.Refs, rep.RefsDeferred, rep.RefsUnverified, rep.ErrorsByRepo, 5-len(asked))
			}
			return slices.Clone(asked), rep.RefsDeferred
		}
		expect := func(valid ...string) {
			t.Helper()
			for _, br := range branches {
				want := checkpointd.ValidityUnverified
				if slices.Contains(valid, br) {
					want = checkpointd.ValidityValid
				}
				if got := e.get(sessions[br]); got.Validity != want {
					t.Errorf("session on %s: %s (%s), want %s", br, got.Validity, got.ValidityReason, want)
				}
			}
		}
		// Every session is unverified (new): they go in key order, as
		// far as the time lets.
		if got, _ := pass(2); !slices.Equal(got, []string{"b1", "b2"}) {
			t.Errorf("first pass asked %v, want b1 b2", got)
		}
		expect("b1", "b2")
		// The unverified ones first.
		if got, _ := pass(2); !slices.Equal(got, []string{"b3", "b4"}) {
			t.Errorf("second pass asked %v, want the unverified b3 b4", got)
		}
		expect("b1", "b2", "b3", "b4")
		// b5, the one left unverified, then on from where the last pass
		// stopped (b5): round to b1.
		if got, _ := pass(2); !slices.Equal(got, []string{"b5", "b1"}) {
			t.Errorf("third pass asked %v, want b5 then b1", got)
		}
		expect(branches...)
		// All valid: round the list from b2; those not reached stay valid.
		if got, _ := pass(3); !slices.Equal(got, []string{"b2", "b3", "b4"}) {
			t.Errorf("fourth pass asked %v, want b2 b3 b4", got)
		}
		expect(branches...)
		if got, _ := pass(2); !slices.Equal(got, []string{"b5", "b1"}) {
			t.Errorf("fifth pass asked %v, want b5 b1", got)
		}
		// A pass with time for all asks all, and defers nothing.
		if got, deferred := pass(10); len(got) != 5 || deferred != 0 {
			t.Errorf("a pass with time for every ref asked %v, deferred %d", got, deferred)
		}
		expect(branches...)
	})
}

// TestPassInChunks: a pass over more refs than one chunk records each
// chunk as it goes and adds them up: every session valid, every ref asked
// once, the report's counts over all chunks.
func TestPassInChunks(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		e := newEnv(t, b)
		e.forge.AddRepo(1, "acme/widgets")
		const n = 450 // two chunks of 200 and part of a third
		for i := range n {
			br := "fix-" + strconv.Itoa(i)
			e.forge.SetBranch("acme/widgets", br, sha(i))
			e.session("acme/widgets", br, 0, sha(i))
		}
		rep := e.pass()
		if rep.Refs != n || rep.ForgeCalls != n || rep.RefsDeferred != 0 || rep.Verdicts["valid"] != n || rep.Changed["valid"] != n {
			t.Errorf("report: refs %d, forge calls %d, deferred %d, verdicts %v, changed %v; want %d of each, all valid",
				rep.Refs, rep.ForgeCalls, rep.RefsDeferred, rep.Verdicts, rep.Changed, n)
		}
	})
}
