package main

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// shBlocks are the ```sh blocks of a markdown document, in order, each
// with the heading of the section it is in.
func shBlocks(t *testing.T, path string) (blocks, headings []string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	heading := ""
	var cur *strings.Builder
	for _, line := range strings.Split(string(raw), "\n") {
		switch {
		case cur == nil && strings.HasPrefix(line, "#"):
			heading = strings.TrimSpace(strings.TrimLeft(line, "#"))
		case cur == nil && strings.TrimSpace(line) == "```sh":
			cur = &strings.Builder{}
		case cur != nil && strings.TrimSpace(line) == "```":
			blocks, headings = append(blocks, cur.String()), append(headings, heading)
			cur = nil
		case cur != nil:
			cur.WriteString(line + "\n")
		}
	}
	return blocks, headings
}

// TestBackupDocPrivateFiles runs docs/backup.md's SQLite backup, as
// written, under the common umask 022, on a real database, and proves
// what it leaves is readable by its owner only: a backup holds every
// token hash and checkpoint, and the key opens the sealed fields. Every
// other block that writes a backup must set the same umask.
func TestBackupDocPrivateFiles(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("sqlite3"); err != nil {
		t.Skip("needs the sqlite3 shell the document uses")
	}
	blocks, headings := shBlocks(t, "../../docs/backup.md")
	var backup string
	for i, b := range blocks {
		if strings.Contains(b, "/backup/") && !strings.Contains(b, "umask 077") {
			t.Errorf("the block under %q writes a backup without umask 077:\n%s", headings[i], b)
		}
		if headings[i] == "SQLite" && backup == "" {
			backup = b
		}
	}
	if backup == "" {
		t.Fatal("docs/backup.md has no sh block under ## SQLite")
	}

	root := t.TempDir()
	data, bk, keys := filepath.Join(root, "data"), filepath.Join(root, "backup"), filepath.Join(root, "keys")
	if err := os.MkdirAll(keys, 0o700); err != nil {
		t.Fatal(err)
	}
	// A real database and key, from the commands that make them.
	if _, errOut, err := runCLI(t, nil, "token", "create", "--data-dir", data, "--role", "reader", "--name", "backup-doc"); err != nil {
		t.Fatalf("token create: %v\n%s", err, errOut)
	}
	writeTestKey(t, filepath.Join(data, "checkpointd.key"), "k1 "+randomKey(t)+"\n")
	script := strings.NewReplacer("/var/lib/checkpointd", data, "/backup/", bk+"/", "/secure/keys/", keys+"/").Replace(backup)
	cmd := exec.Command("sh", "-ec", "umask 022\n"+script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the backup block failed: %v\n%s\n%s", err, out, script)
	}
	var made []string
	for _, dir := range []string{bk, keys} {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			if path != dir || dir == bk {
				made = append(made, path)
			}
			if fi.Mode().Perm()&0o077 != 0 {
				t.Errorf("the backup block left %s with mode %04o, want no group or other bits", path, fi.Mode().Perm())
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	dbs := regexp.MustCompile(`checkpointd-[0-9T]+/checkpointd\.db$`)
	found := false
	for _, p := range made {
		found = found || dbs.MatchString(p)
	}
	if !found || len(made) < 3 {
		t.Errorf("the backup block made %v, want a backup directory with checkpointd.db and the key copy", made)
	}
}
