package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/checkpointd/checkpointd/reconcile"
)

// TestPrintReportUnknowns: a rename whose repository id the pass did not
// learn is printed without an id (never "repository id 0"), and a verdict
// is never printed with an empty explanation after its colon.
func TestPrintReportUnknowns(t *testing.T) {
	rep := &reconcile.Report{ID: "rec_1", Trigger: "api", Forge: "https://git.example",
		Renames: []reconcile.Rename{
			{Repo: "acme/old", NewName: "acme/new", Source: "forge"},
			{Repo: "acme/hooked", RepoID: 42, NewName: "acme/hooked-renamed", Source: "webhook"},
		},
		NotValid: []reconcile.Verdict{{SessionID: "ses_1", Repo: "acme/w", Validity: "unverified"}}}
	var out bytes.Buffer
	printReport(&out, rep)
	got := out.String()
	for _, want := range []string{
		"renamed: acme/old → acme/new (seen by forge)\n",
		"renamed: acme/hooked → acme/hooked-renamed (repository id 42, seen by webhook)\n",
		"not valid: ses_1 acme/w unverified\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	if strings.Contains(got, "id 0") || strings.Contains(got, ": \n") {
		t.Errorf("an unknown printed as a value:\n%s", got)
	}
}
