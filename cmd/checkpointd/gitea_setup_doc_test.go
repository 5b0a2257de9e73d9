package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/checkpointd/checkpointd/reconcile"
)

// TestGiteaSetupCheckMatchesReport proves the check docs/gitea-setup.md
// tells a user to make after configuring the forge reads what
// `checkpointd reconcile` prints: the table names the forge on its
// `forge:` line and each failed repository on an `error:` line, and a
// rename on a `renamed:` line; errors_by_repo and renames are names of
// the --json report only, and the document says so.
func TestGiteaSetupCheckMatchesReport(t *testing.T) {
	t.Parallel()
	r := &reconcile.Report{ID: "rec_1", Trigger: "manual", Forge: "https://gitea.example.com",
		ErrorsByRepo: map[string][]string{"acme/widgets": {"GET …/branches/main: 403 Forbidden"}},
		Renames:      []reconcile.Rename{{Repo: "acme/old", RepoID: 7, NewName: "acme/new", Source: "forge"}}}
	var table bytes.Buffer
	printReport(&table, r)
	js, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("../../docs/gitea-setup.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	for _, tc := range []struct{ doc, printed string }{
		{"`forge: https://gitea.example.com`", "forge: https://gitea.example.com"},
		{"`error: acme/widgets …`", "error: acme/widgets "},
		{"`renamed:`", "renamed: acme/old"},
	} {
		if !strings.Contains(doc, tc.doc) {
			t.Errorf("docs/gitea-setup.md does not quote %s", tc.doc)
		}
		if !strings.Contains(table.String(), tc.printed) {
			t.Errorf("checkpointd reconcile does not print %q, which docs/gitea-setup.md quotes:\n%s", tc.printed, &table)
		}
	}
	for _, field := range []string{"errors_by_repo", "renames"} {
		if strings.Contains(table.String(), field) {
			t.Errorf("the table now prints %s: docs/gitea-setup.md says only --json does", field)
		}
		if !strings.Contains(string(js), `"`+field+`"`) {
			t.Errorf("the --json report has no %s, which docs/gitea-setup.md names", field)
		}
		// Wherever the document names the field, --json is said within
		// the same few lines.
		for i := 0; ; {
			j := strings.Index(doc[i:], "`"+field+"`")
			if j < 0 {
				break
			}
			j += i
			if near := doc[max(0, j-200):min(len(doc), j+200)]; !strings.Contains(near, "--json") {
				t.Errorf("docs/gitea-setup.md names %s without saying it is in the --json report: …%s…", field, near)
			}
			i = j + 1
		}
	}
}
