package reconcile_test

import (
	"testing"

	"github.com/checkpointd/checkpointd"
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
