package reconcile_test

import (
	"testing"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/reconcile"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestRestartNeedsReconcile: sessions valid before a restart are
// unverified right after it (the reset serve runs before serving), a
// checkpoint written before the first pass does not make them valid on the
// evidence from before the restart, and only the pass confirms them again.
func TestRestartNeedsReconcile(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		url := storetest.URL(t, b)
		before := newEnvOn(t, storetest.OpenURL(t, url, checkpointd.SystemClock{}))
		before.forge.AddRepo(1, "acme/widgets")
		before.forge.SetBranch("acme/widgets", "main", sha(1))
		before.forge.SetPull("acme/widgets", forgetestPull(3, "open", false, "feat", sha(2)))
		onBranch := before.session("acme/widgets", "main", 0, sha(1))
		onPR := before.session("acme/widgets", "", 3, sha(2))
		lease, ref := before.lease(onPR, checkpointd.Resource{Kind: checkpointd.ResourcePR, Repo: "acme/widgets", Number: 3})
		before.checkpoint(onPR, sha(2), ref)
		before.pass()
		before.expect(onBranch, checkpointd.ValidityValid, "")
		before.expect(onPR, checkpointd.ValidityValid, "")
		before.s.Close()

		// The restart: a new store on the same database, reset before
		// anything is served.
		after := newEnvOn(t, storetest.OpenURL(t, url, checkpointd.SystemClock{}))
		after.r.Forge = reconcile.Gitea(before.forge.URL, "", 0)
		n, err := after.s.ResetValidity(t.Context(), "the daemon restarted; not reconciled since")
		if err != nil || n != 2 {
			t.Fatalf("ResetValidity: %d %v, want 2 sessions", n, err)
		}
		after.expect(onBranch, checkpointd.ValidityUnverified, "restarted")
		after.expect(onPR, checkpointd.ValidityUnverified, "restarted")
		if ev := after.lastValidityEvent(onBranch); ev["source"] != "boot" || ev["from"] != "valid" {
			t.Errorf("reset event %v, want from valid with source boot", ev)
		}
		if n, err := after.s.ResetValidity(t.Context(), "again"); err != nil || n != 0 {
			t.Errorf("second reset changed %d sessions (%v), want none", n, err)
		}
		// The agent checkpoints the head it knew: what was observed before
		// the restart is no evidence any more.
		after.checkpoint(after.get(onBranch), sha(1))
		after.expect(onBranch, checkpointd.ValidityUnverified, "")

		rep := after.pass()
		after.expect(onBranch, checkpointd.ValidityValid, "")
		after.expect(onPR, checkpointd.ValidityValid, "")
		if rep.Changed["valid"] != 2 {
			t.Errorf("the pass after the restart changed %v, want 2 sessions to valid", rep.Changed)
		}
		if l, err := after.s.GetLease(t.Context(), lease.ID); err != nil || l.State != checkpointd.LeaseHeld {
			t.Errorf("the PR lease across the restart: %v %v, want still held", l, err)
		}
	})
}
