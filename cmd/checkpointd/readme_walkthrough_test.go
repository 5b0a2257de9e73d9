package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeWalkthrough runs scripts/walkthrough.sh, which the README
// runs, with bash from the repository root against a daemon started the
// way the README says (its webhook secret), on SQLite in a temporary data
// directory, twice in a row: each run must end resumable, with a completed
// drain and its session ended. The script runs under `set -euo pipefail`,
// so any failing command fails the test.
func TestReadmeWalkthrough(t *testing.T) {
	// Without its tools the walkthrough skips, as the browser tests do,
	// except where CHECKPOINTD_TEST_REQUIRE_TOOLS=1 (.ci/run installs them):
	// there it fails.
	for _, tool := range []string{"bash", "curl", "jq", "openssl", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CHECKPOINTD_TEST_REQUIRE_TOOLS") == "1" {
				t.Fatalf("the README walkthrough needs %s: %v", tool, err)
			}
			t.Skipf("the README walkthrough needs %s (%v): skipped", tool, err)
		}
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "\nbash scripts/walkthrough.sh\n") {
		t.Fatal("the README no longer runs bash scripts/walkthrough.sh")
	}
	serveLine := regexp.MustCompile("(?m)^CHECKPOINTD_WEBHOOK_SECRET=(\\S+) go run ./cmd/checkpointd serve$").
		FindStringSubmatch(string(readme))
	if serveLine == nil {
		t.Fatal("the README no longer starts the walkthrough's daemon with CHECKPOINTD_WEBHOOK_SECRET=… go run ./cmd/checkpointd serve")
	}
	dir := t.TempDir()
	d := startServe(t, environ{"CHECKPOINTD_WEBHOOK_SECRET": serveLine[1]}, "--data-dir", dir)

	// Twice in a row against one daemon: the walkthrough leaves nothing
	// that stops it from running again.
	var out []byte
	for run := 1; run <= 2; run++ {
		cmd := exec.CommandContext(t.Context(), "bash", "scripts/walkthrough.sh")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CHECKPOINTD_URL="+d.URL, "CHECKPOINTD_DATA_DIR="+dir, "CHECKPOINTD_TOKEN=",
			"WEBHOOK_SECRET="+serveLine[1])
		var err error
		if out, err = cmd.CombinedOutput(); err != nil {
			t.Fatalf("run %d of the walkthrough failed: %v\n%s", run, err, out)
		}
	}
	for _, want := range []string{
		`"run_superseded"`,
		`"resumable": false`,
		`"resumable": true`,
		"TO UNBLOCK",
		"write_checkpoint",
		"completed: all 1 active sessions hold a fresh, complete, valid checkpoint",
		"lifted (it had completed)",
		"drain.completed",
		`"state":"ended"`,
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the walkthrough's output lacks %q:\n%s", want, out)
		}
	}
	if strings.Index(string(out), `"resumable": true`) < strings.Index(string(out), `"resumable": false`) {
		t.Errorf("resumable only after the signed delivery, not before:\n%s", out)
	}
}
