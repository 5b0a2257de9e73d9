package reconcile_test

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/reconcile"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestOneForgeCallPerDistinctRef: 30 sessions over 5 distinct refs (two
// repos, branches with slashes, PRs) cost 5 forge calls, and every session
// on a ref whose head matches its checkpoint becomes valid.
func TestOneForgeCallPerDistinctRef(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		e := newEnv(t, b)
		e.forge.AddRepo(1, "acme/widgets")
		e.forge.AddRepo(2, "other/tools")
		type ref struct {
			repo, branch string
			pr           int64
			head         string
		}
		refs := []ref{
			{"acme/widgets", "main", 0, sha(1)},
			{"acme/widgets", "feature/deep/slash", 0, sha(2)},
			{"acme/widgets", "", 7, sha(3)},
			{"other/tools", "fix-1", 0, sha(4)},
			{"other/tools", "", 3, sha(5)},
		}
		var sessions []*checkpointd.Session
		for i := range 30 {
			r := refs[i%len(refs)]
			if r.pr > 0 {
				e.forge.SetPull(r.repo, forgetestPull(r.pr, "open", false, "pr-head", r.head))
			} else {
				e.forge.SetBranch(r.repo, r.branch, r.head)
			}
			// Every other session spells the repo in another case: the
			// forge matches names case-insensitively, and so does reconcile.
			repo := r.repo
			if i%2 == 1 {
				repo = strings.ToUpper(repo[:1]) + repo[1:]
			}
			sessions = append(sessions, e.session(repo, r.branch, r.pr, r.head))
		}
		rep := e.pass()
		if got := e.forge.Calls(); got != 5 {
			t.Errorf("forge served %d requests for 5 distinct refs, want 5: %v", got, e.forge.Paths())
		}
		if !slices.ContainsFunc(e.forge.Paths(), func(p string) bool {
			return strings.EqualFold(p, "/api/v1/repos/acme/widgets/branches/feature/deep/slash")
		}) {
			t.Errorf("a branch with slashes was not asked for by its path: %v", e.forge.Paths())
		}
		want := &reconcile.Report{SessionsChecked: 30, Refs: 5, ForgeCalls: 5,
			Verdicts: map[string]int{"valid": 30}, Changed: map[string]int{"valid": 30}}
		got := &reconcile.Report{SessionsChecked: rep.SessionsChecked, Refs: rep.Refs, ForgeCalls: rep.ForgeCalls,
			Verdicts: rep.Verdicts, Changed: rep.Changed}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("report (-want +got):\n%s", diff)
		}
		if len(rep.ErrorsByRepo) != 0 || rep.Error != "" {
			t.Errorf("errors in a clean pass: %v %q", rep.ErrorsByRepo, rep.Error)
		}
		for _, s := range sessions {
			e.expect(s, checkpointd.ValidityValid, "")
			if ev := e.lastValidityEvent(s); ev["source"] != "reconcile:"+rep.ID {
				t.Fatalf("validity event %v, want the evidence reconcile:%s", ev, rep.ID)
			}
		}
		// A second pass asks again (5 more calls) and changes nothing.
		e.forge.ResetCalls()
		if rep := e.pass(); e.forge.Calls() != 5 || len(rep.Changed) != 0 {
			t.Errorf("second pass: %d calls, changed %v", e.forge.Calls(), rep.Changed)
		}
	})
}

// TestVerdictsFromTheForge: matching → valid, drifted → stale, PR closed
// or merged and branch deleted → invalidated with their leases released;
// a 404 from a repository the token cannot see, or of a PR, is no evidence.
func TestVerdictsFromTheForge(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		e := newEnv(t, b)
		e.forge.AddRepo(1, "acme/widgets")
		e.forge.SetBranch("acme/widgets", "match", sha(1))
		e.forge.SetBranch("acme/widgets", "team/drift", sha(3))
		e.forge.SetPull("acme/widgets", forgetestPull(10, "open", false, "pr-open", sha(10)))
		e.forge.SetPull("acme/widgets", forgetestPull(11, "closed", false, "pr-closed", sha(11)))
		e.forge.SetPull("acme/widgets", forgetestPull(12, "closed", true, "pr-merged", sha(12)))

		match := e.session("acme/widgets", "match", 0, sha(1))
		drift := e.session("acme/widgets", "team/drift", 0, sha(2))
		open := e.session("acme/widgets", "", 10, sha(10))
		closed := e.session("acme/widgets", "", 11, sha(11))
		closedLease, ref := e.lease(closed, checkpointd.Resource{Kind: checkpointd.ResourcePR, Repo: "acme/widgets", Number: 11})
		e.checkpoint(closed, sha(11), ref)
		merged := e.session("acme/widgets", "", 12, sha(12))
		deleted := e.session("acme/widgets", "gone/branch", 0, sha(4))
		deletedLease, ref := e.lease(deleted, checkpointd.Resource{Kind: checkpointd.ResourceBranch, Repo: "acme/widgets", Branch: "gone/branch"})
		e.checkpoint(deleted, sha(4), ref)
		noPR := e.session("acme/widgets", "", 99, sha(5))
		hidden := e.session("secret/repo", "main", 0, sha(6))

		rep := e.pass()
		e.expect(match, checkpointd.ValidityValid, "")
		e.expect(drift, checkpointd.ValidityStale, sha(3))
		e.expect(open, checkpointd.ValidityValid, "")
		e.expect(closed, checkpointd.ValidityInvalidated, "was closed without being merged")
		e.expect(merged, checkpointd.ValidityInvalidated, "was merged")
		e.expect(deleted, checkpointd.ValidityInvalidated, "branch gone/branch was deleted")
		e.expect(noPR, checkpointd.ValidityUnverified, "pull request #99 is not found")
		e.expect(hidden, checkpointd.ValidityUnverified, "not visible to the token")
		for _, l := range []string{closedLease.ID, deletedLease.ID} {
			if got, err := e.s.GetLease(t.Context(), l); err != nil || got.State != checkpointd.LeaseReleased {
				t.Errorf("lease %s of an ended ref: %v %v, want released", l, got, err)
			}
		}
		if rep.Leases.ReleasedByRefs != 2 {
			t.Errorf("released_by_refs %d, want 2", rep.Leases.ReleasedByRefs)
		}
		wantErrs := map[string][]string{
			"acme/widgets": {"pr:99: pull request #99 is not found"},
			"secret/repo":  {"branch:main: the repository is not found or not visible to the token"},
		}
		if diff := cmp.Diff(wantErrs, rep.ErrorsByRepo); diff != "" {
			t.Errorf("errors by repo (-want +got):\n%s", diff)
		}
		wantVerdicts := map[string]int{"valid": 2, "stale": 1, "invalidated": 3, "unverified": 2}
		if diff := cmp.Diff(wantVerdicts, rep.Verdicts); diff != "" {
			t.Errorf("verdicts (-want +got):\n%s", diff)
		}
		// Invalidated sessions are final: the next pass does not ask about
		// their refs again.
		e.forge.ResetCalls()
		if rep := e.pass(); rep.Refs != 5 || rep.SessionsChecked != 5 {
			t.Errorf("second pass checked %d sessions on %d refs, want 5 on 5", rep.SessionsChecked, rep.Refs)
		}
	})
}

// TestForgeNotConfigured: without a forge the report says so, nothing is
// asked and sessions stay unverified.
func TestForgeNotConfigured(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		e := newEnv(t, b)
		e.r.Forge, e.r.ForgeURL = nil, ""
		sess := e.session("acme/widgets", "main", 0, sha(1))
		rep := e.pass()
		if !strings.Contains(rep.Error, "forge not configured") || !strings.Contains(rep.Error, "CHECKPOINTD_GITEA_URL") ||
			rep.Forge != "not configured" || rep.ForgeCalls != 0 || rep.RefsUnverified != 1 {
			t.Errorf("report %+v: want forge not configured, naming what to set", rep)
		}
		e.expect(sess, checkpointd.ValidityUnverified, "")
		if e.forge.Calls() != 0 {
			t.Errorf("%d forge calls without a forge", e.forge.Calls())
		}
	})
}

// TestRenamesReported: a repository renamed on the forge is still
// answered under its old name (the forge redirects) and reported; a rename
// that a webhook showed (the same repository id under a new name) is
// reported too.
func TestRenamesReported(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		e := newEnv(t, b)
		e.forge.AddRepo(41, "acme/old")
		e.forge.SetBranch("acme/old", "main", sha(1))
		e.forge.SetPull("acme/old", forgetestPull(5, "open", false, "main", sha(1)))
		e.forge.AddRepo(42, "acme/hooked")
		e.forge.SetPull("acme/hooked", forgetestPull(6, "open", false, "feat", sha(3)))
		byRedirect := e.session("acme/old", "main", 5, sha(1))
		byWebhook := e.session("acme/hooked", "", 6, sha(3))

		// The first pass learns the ids from the PR answers.
		if rep := e.pass(); len(rep.Renames) != 0 {
			t.Fatalf("renames before any rename: %v", rep.Renames)
		}
		e.forge.Rename("acme/old", "acme/new")
		// A delivery from the renamed repository: same id, new name.
		if _, err := e.s.Observe(t.Context(), []checkpointd.Observation{{Repo: "acme/hooked-renamed", RepoID: 42,
			Branch: "unrelated", Head: sha(9), Source: "webhook:d-1"}}); err != nil {
			t.Fatal(err)
		}
		rep := e.pass()
		want := []reconcile.Rename{
			{Repo: "acme/hooked", RepoID: 42, NewName: "acme/hooked-renamed", Source: "webhook"},
			{Repo: "acme/old", RepoID: 41, NewName: "acme/new", Source: "forge"},
		}
		if diff := cmp.Diff(want, rep.Renames); diff != "" {
			t.Errorf("renames (-want +got):\n%s", diff)
		}
		// The old name still answers (redirected): the verdicts hold.
		e.expect(byRedirect, checkpointd.ValidityValid, "")
		e.expect(byWebhook, checkpointd.ValidityValid, "")
	})
}

// TestNotValidAlwaysExplained: every session the report lists as not valid
// carries its explanation — a new session with no checkpoint, and one whose
// checkpoint was never checked because no forge is configured.
func TestNotValidAlwaysExplained(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		e := newEnv(t, b)
		e.r.Forge, e.r.ForgeURL = nil, ""
		checked := e.session("acme/widgets", "main", 0, sha(1))
		fresh, err := e.s.CreateSession(t.Context(), store.NewSession{Repo: "acme/widgets", Role: "author", Branch: "new"})
		if err != nil {
			t.Fatal(err)
		}
		rep := e.pass()
		got := map[string]string{}
		for _, v := range rep.NotValid {
			got[v.SessionID] = v.Reason
		}
		for id, want := range map[string]string{checked.ID: "no live head", fresh.ID: "no checkpoint"} {
			if !strings.Contains(got[id], want) {
				t.Errorf("session %s listed as not valid with reason %q, want …%s…", id, got[id], want)
			}
		}
		for _, s := range []*checkpointd.Session{checked, fresh} {
			if r := e.get(s).ValidityReason; r == "" {
				t.Errorf("session %s reads unverified with no reason", s.ID)
			}
		}
	})
}

// TestChangedCountsSessions: a session bound to a branch and to its PR is
// asked about twice (one forge call per ref) but moves once, and the
// report counts it once, as the validity metric does.
func TestChangedCountsSessions(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		e := newEnv(t, b)
		obs := &validityCounts{n: map[string]int{}}
		e.s.SetObserver(obs)
		e.forge.AddRepo(1, "acme/widgets")
		e.forge.SetBranch("acme/widgets", "fix-1", sha(1))
		e.forge.SetPull("acme/widgets", forgetestPull(7, "open", false, "fix-1", sha(1)))
		e.forge.SetBranch("acme/widgets", "fix-2", sha(2))
		e.forge.SetBranch("acme/widgets", "fix-3", sha(9))
		both := e.session("acme/widgets", "fix-1", 7, sha(1))
		e.session("acme/widgets", "fix-2", 0, sha(2))
		drifted := e.session("acme/widgets", "fix-3", 0, sha(3))
		rep := e.pass()
		if rep.Refs != 4 || rep.SessionsChecked != 3 {
			t.Fatalf("checked %d sessions on %d refs, want 3 on 4", rep.SessionsChecked, rep.Refs)
		}
		if diff := cmp.Diff(map[string]int{"valid": 2, "stale": 1}, rep.Changed); diff != "" {
			t.Errorf("changed (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(obs.get(), rep.Changed); diff != "" {
			t.Errorf("report and validity metric disagree (-metric +report):\n%s", diff)
		}
		e.expect(both, checkpointd.ValidityValid, "")
		e.expect(drifted, checkpointd.ValidityStale, sha(9))
		// Nothing moves on the second pass.
		if rep := e.pass(); len(rep.Changed) != 0 {
			t.Errorf("second pass changed %v", rep.Changed)
		}
	})
}

// validityCounts is a store observer counting reconcile's validity
// transitions, as the validity metric does.
type validityCounts struct {
	mu sync.Mutex
	n  map[string]int
}

func (v *validityCounts) ValidityChanged(cause string, to checkpointd.Validity, n int) {
	if cause == store.CauseReconcile {
		v.mu.Lock()
		v.n[string(to)] += n
		v.mu.Unlock()
	}
}
func (v *validityCounts) LeaseEvent(string)        {}
func (v *validityCounts) StoreError(string)        {}
func (v *validityCounts) RefSettled(time.Duration) {}
func (v *validityCounts) StoreRetry(string)        {}
func (v *validityCounts) get() map[string]int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return maps.Clone(v.n)
}
