package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// walkthroughMarker precedes the README block TestReadmeWalkthrough runs.
const walkthroughMarker = "<!-- walkthrough: run by TestReadmeWalkthrough in cmd/checkpointd -->"

// TestReadmeWalkthrough runs the README's walkthrough block, as written,
// with bash from the repository root against a daemon started the way the
// README says (its webhook secret), on SQLite in a temporary data
// directory: it must end resumable and with a completed drain. The block
// runs under `set -euo pipefail`, so any failing command fails the test.
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
	block := walkthroughBlock(t, string(readme))
	serveLine := regexp.MustCompile("(?m)^CHECKPOINTD_WEBHOOK_SECRET=(\\S+) go run ./cmd/checkpointd serve$").
		FindStringSubmatch(string(readme))
	if serveLine == nil {
		t.Fatal("the README no longer starts the walkthrough's daemon with CHECKPOINTD_WEBHOOK_SECRET=… go run ./cmd/checkpointd serve")
	}
	dir := t.TempDir()
	d := startServe(t, environ{"CHECKPOINTD_WEBHOOK_SECRET": serveLine[1]}, "--data-dir", dir)

	cmd := exec.CommandContext(t.Context(), "bash", "-c", block)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CHECKPOINTD_URL="+d.URL, "CHECKPOINTD_DATA_DIR="+dir, "CHECKPOINTD_TOKEN=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the walkthrough failed: %v\n%s", err, out)
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
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the walkthrough's output lacks %q:\n%s", want, out)
		}
	}
	if strings.Index(string(out), `"resumable": true`) < strings.Index(string(out), `"resumable": false`) {
		t.Errorf("resumable only after the signed delivery, not before:\n%s", out)
	}
}

// walkthroughBlock is the fenced sh block right after the marker.
func walkthroughBlock(t *testing.T, readme string) string {
	t.Helper()
	_, rest, ok := strings.Cut(readme, walkthroughMarker)
	if !ok {
		t.Fatalf("README.md has no %q", walkthroughMarker)
	}
	rest = strings.TrimLeft(rest, "\n")
	body, ok := strings.CutPrefix(rest, "```sh\n")
	if !ok {
		t.Fatal("the walkthrough marker is not followed by a ```sh block")
	}
	body, _, ok = strings.Cut(body, "\n```\n")
	if !ok {
		t.Fatal("the walkthrough block is not closed")
	}
	return body
}
