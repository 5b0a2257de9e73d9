package reconcile_test

import (
	"errors"
	"testing"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/reconcile"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestVerifySessionsForTheDrainGate: the drain gate's request for evidence
// runs a pass that confirms the sessions it names, and asks nothing when
// nothing is named.
func TestVerifySessionsForTheDrainGate(t *testing.T) {
	e := newEnv(t, storetest.SQLite)
	e.forge.AddRepo(1, "acme/widgets")
	e.forge.SetBranch("acme/widgets", "main", sha(1))
	sess := e.session("acme/widgets", "main", 0, sha(1))
	e.expect(sess, checkpointd.ValidityUnverified, "")

	if err := e.r.VerifySessions(t.Context(), nil); err != nil || e.forge.Calls() != 0 {
		t.Fatalf("nothing to verify: err %v, %d forge calls", err, e.forge.Calls())
	}
	if err := e.r.VerifySessions(t.Context(), []string{sess.ID}); err != nil {
		t.Fatal(err)
	}
	e.expect(sess, checkpointd.ValidityValid, "")
}

// TestVerifySessionsWithoutAForge: without a forge there is no evidence to
// fetch. The gate hears why at once, and no pass runs: each blocked drain
// completion used to run a whole pass that could only say the same.
func TestVerifySessionsWithoutAForge(t *testing.T) {
	e := newEnv(t, storetest.SQLite)
	e.r.Forge = nil
	sess := e.session("acme/widgets", "main", 0, sha(1))
	if err := e.r.VerifySessions(t.Context(), []string{sess.ID}); !errors.Is(err, reconcile.ErrForgeNotConfigured) {
		t.Fatalf("err %v, want ErrForgeNotConfigured", err)
	}
	if rep, err := e.s.LastReconcileReport(t.Context()); !errors.Is(err, checkpointd.ErrNotFound) {
		t.Fatalf("a pass ran: report %s, err %v", rep, err)
	}
	e.expect(sess, checkpointd.ValidityUnverified, "")
}
