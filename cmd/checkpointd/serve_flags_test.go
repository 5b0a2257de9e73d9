package main

import (
	"os"
	"strings"
	"testing"
)

// TestServeValidatesFlagsBeforeWriting proves a start refused for a bad
// flag leaves the data directory as it found it: no database, no key, no
// operator token, no lock file. Each refusal names the flag and what is
// wrong with it, and says nothing about a database it never opened.
func TestServeValidatesFlagsBeforeWriting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		env     environ
		args    []string
		wants   []string
		notWant string
	}{
		{name: "listen without host", args: []string{"--listen", "18300"},
			wants: []string{"--listen", "18300", "host:port"}},
		{name: "listen bad port", args: []string{"--listen", "127.0.0.1:99999"},
			wants: []string{"--listen", "127.0.0.1:99999"}},
		{name: "metrics-listen without host", args: []string{"--metrics-listen", "9090"},
			wants: []string{"--metrics-listen", "9090", "host:port"}},
		{name: "gitea-url with credentials", args: []string{"--gitea-url", "https://bot:hunter2@gitea.example.com"},
			wants: []string{"--gitea-url", "credentials"}, notWant: "hunter2"},
		{name: "gitea-url not a url", args: []string{"--gitea-url", "gitea.example.com"},
			wants: []string{"--gitea-url"}},
		{name: "missing key file", args: []string{"--key-file", "/nonexistent"},
			wants: []string{"/nonexistent", "does not exist"}, notWant: "this database was written with"},
		{name: "missing key file from env", env: environ{"CHECKPOINTD_KEY_FILE": "/nonexistent"},
			wants: []string{"/nonexistent", "does not exist"}, notWant: "this database was written with"},
		{name: "malformed CHECKPOINTD_KEY", env: environ{"CHECKPOINTD_KEY": "not a key"},
			wants: []string{"CHECKPOINTD_KEY", "malformed"}},
		{name: "database-url of another kind", args: []string{"--database-url", "mysql://root:hunter2@db/checkpointd"},
			wants: []string{"--database-url", `"mysql"`, "postgres://"}, notWant: "hunter2"},
		{name: "database-url unparsable", args: []string{"--database-url", "postgres://u:p%zz@db/checkpointd"},
			wants: []string{"--database-url", "postgres://"}, notWant: "p%zz"},
		{name: "reconcile interval", args: []string{"--reconcile-interval", "0s"},
			wants: []string{"--reconcile-interval"}},
		{name: "worktree root", args: []string{"--worktree-root", "relative/dir"},
			wants: []string{"--worktree-root"}},
		{name: "retention", args: []string{"--retain-checkpoints", "-1"},
			wants: []string{"--retain-checkpoints"}},
		{name: "max document bytes", args: []string{"--max-document-bytes", "0"},
			wants: []string{"--max-document-bytes"}},
		{name: "shutdown timeout", args: []string{"--shutdown-timeout", "-1s"},
			wants: []string{"--shutdown-timeout"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			_, _, err := runCLI(t, tc.env, append([]string{"serve", "--data-dir", dir, "--listen", "127.0.0.1:0"}, tc.args...)...)
			if err == nil {
				t.Fatalf("serve %v returned nil; want a refusal", tc.args)
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if tc.notWant != "" && strings.Contains(err.Error(), tc.notWant) {
				t.Errorf("error %q says %q", err, tc.notWant)
			}
			entries, rerr := os.ReadDir(dir)
			if rerr != nil {
				t.Fatal(rerr)
			}
			for _, e := range entries {
				t.Errorf("refused start left %s in the data directory", e.Name())
			}
		})
	}
}

// TestServeDoesNotCreateAMissingDataDir proves a refused start does not
// even create the data directory.
func TestServeDoesNotCreateAMissingDataDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir() + "/data"
	if _, _, err := runCLI(t, nil, "serve", "--data-dir", dir, "--listen", "18300"); err == nil {
		t.Fatal("serve --listen 18300 returned nil; want a refusal")
	}
	mustNotExist(t, dir)
}
