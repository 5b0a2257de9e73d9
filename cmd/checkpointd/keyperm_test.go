package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeWarnsOfExposedKeyFile proves a key file other users may read
// (or write) is used with a warning at start that names the file and the
// fix, and an owner-only one — the default, created 0600 — with none.
// It warns rather than refuses: see docs/keys.md.
func TestServeWarnsOfExposedKeyFile(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		mode os.FileMode
		warn bool
	}{
		{"world-readable", 0o644, true},
		{"group-readable", 0o640, true},
		{"group-writable", 0o620, true},
		{"owner-only", 0o600, false},
		{"owner read-only", 0o400, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(t.TempDir(), "server.key")
			key := randomKey(t)
			writeTestKey(t, path, "k1 "+key+"\n")
			if err := os.Chmod(path, tc.mode); err != nil {
				t.Fatal(err)
			}
			d := startServe(t, nil, "--data-dir", dir, "--key-file", path)
			if err := d.stop(); err != nil {
				t.Fatal(err)
			}
			log := d.stderr.String()
			var warning string
			for _, l := range strings.Split(log, "\n") {
				if strings.Contains(l, "level=WARN") && strings.Contains(l, "key file") {
					warning = l
				}
			}
			switch {
			case tc.warn && warning == "":
				t.Fatalf("no warning for a %o key file; log:\n%s", tc.mode, log)
			case tc.warn && (!strings.Contains(warning, path) || !strings.Contains(warning, "chmod 600 "+path)):
				t.Errorf("the warning does not name the file and the fix (chmod 600 %s): %s", path, warning)
			case !tc.warn && warning != "":
				t.Errorf("a %o key file warned: %s", tc.mode, warning)
			}
			if strings.Contains(log, key) {
				t.Errorf("the log shows the key")
			}
		})
	}
	t.Run("default key file", func(t *testing.T) {
		t.Parallel()
		d := startServe(t, nil, "--data-dir", t.TempDir())
		if err := d.stop(); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(d.stderr.String(), "level=WARN") && strings.Contains(d.stderr.String(), "key file") {
			t.Errorf("the created key file warned:\n%s", d.stderr)
		}
	})
}
