package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksNoServer keeps the client light for the agents that import it:
// none of the daemon's store, database drivers, forge SDK or metrics.
func TestLinksNoServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"/checkpointd/store", "/checkpointd/api", "/checkpointd/reconcile",
			"lib/pq", "modernc.org/sqlite", "jmoiron/sqlx", "code.gitea.io", "prometheus"} {
			if strings.Contains(dep, banned) {
				t.Errorf("the client links %s", dep)
			}
		}
	}
}
