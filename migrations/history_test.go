package migrations_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"

	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
	"github.com/pressly/goose/v3"

	"github.com/checkpointd/checkpointd/migrations"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// A schemaState is the set of migration files one build of main held.
type schemaState struct {
	commit string
	files  map[migrations.Dialect]map[string]string // name → sha256[:12]
}

const historyDir = "testdata/history"

// readStates reads testdata/history/states.txt (scripts/migration-history.sh).
func readStates(t *testing.T) []schemaState {
	t.Helper()
	f, err := os.Open(filepath.Join(historyDir, "states.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []schemaState
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 4 {
			t.Fatalf("states.txt: %q", line)
		}
		if len(out) == 0 || out[len(out)-1].commit != fields[0] {
			out = append(out, schemaState{commit: fields[0], files: map[migrations.Dialect]map[string]string{}})
		}
		st := &out[len(out)-1]
		d := migrations.Dialect(fields[1])
		if st.files[d] == nil {
			st.files[d] = map[string]string{}
		}
		st.files[d][fields[2]] = fields[3]
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) < 20 {
		t.Fatalf("only %d schemas in states.txt: the history is missing", len(out))
	}
	return out
}

func sum12(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])[:12]
}

// stateFS is the migration folder of one state: each file is today's when
// its digest matches, else the archived version (named by its content, so
// one version both dialects had is archived once).
func stateFS(t *testing.T, d migrations.Dialect, files map[string]string) fstest.MapFS {
	t.Helper()
	today, err := migrations.FS(d)
	if err != nil {
		t.Fatal(err)
	}
	out := fstest.MapFS{}
	for name, sum := range files {
		b, err := fs.ReadFile(today, name)
		if err != nil || sum12(b) != sum {
			b, err = os.ReadFile(filepath.Join(historyDir, "files", name+"@"+sum+".sql"))
			if err != nil {
				t.Fatalf("%s/%s as main once had it (sha256 %s…) is not archived: a migration was edited; run scripts/migration-history.sh and add a repair step (migrations/repair.go)", d, name, sum)
			}
		}
		out[name] = &fstest.MapFile{Data: b}
	}
	return out
}

// TestUpgradeFromEverySchemaMainHad builds, on both backends, the schema of
// every distinct set of migrations a first-parent commit of main held —
// with that build's own files, edited ones as they were then — migrates it
// with today's build, and requires the schema a fresh database gets. It is
// how a database of 070f2c7 (00010 without 00009) or of b6e26ee (00003
// before leases.term) is known to upgrade.
func TestUpgradeFromEverySchemaMainHad(t *testing.T) {
	states := readStates(t)
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := context.Background()
		d := dialect(b)
		fresh := openDB(t, b, storetest.URL(t, b))
		if _, err := migrations.Up(ctx, d, fresh); err != nil {
			t.Fatal(err)
		}
		want := schemaOf(t, d, fresh)
		for _, st := range states {
			t.Run(st.commit, func(t *testing.T) {
				db := openDB(t, b, storetest.URL(t, b))
				gd := goose.DialectSQLite3
				if d == migrations.Postgres {
					gd = goose.DialectPostgres
				}
				old, err := goose.NewProvider(gd, db, stateFS(t, d, st.files[d]), goose.WithDisableGlobalRegistry(true))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := old.Up(ctx); err != nil {
					t.Fatalf("the schema of %s: %v", st.commit, err)
				}
				if _, err := migrations.Up(ctx, d, db); err != nil {
					t.Fatalf("upgrading the schema of %s: %v", st.commit, err)
				}
				if diff := cmp.Diff(want, schemaOf(t, d, db)); diff != "" {
					t.Errorf("the schema upgraded from %s is not a fresh one (-fresh +upgraded):\n%s", st.commit, diff)
				}
				// Twice is once: nothing left to apply, nothing changes.
				if pending, err := migrations.Pending(ctx, d, db); err != nil || pending {
					t.Errorf("pending after upgrading: %v %v", pending, err)
				}
			})
		}
	})
}

// TestHistoryHoldsEverySchema checks states.txt against git: every set of
// migrations a first-parent commit held is recorded. Without the history
// (a tarball, a shallow clone) there is nothing to check it against.
func TestHistoryHoldsEverySchema(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	out, err := exec.Command("git", "-C", "..", "rev-parse", "--is-shallow-repository").Output()
	if err != nil || strings.TrimSpace(string(out)) != "false" {
		t.Skipf("no full git history here (%s %v)", out, err)
	}
	recorded := map[string]bool{}
	for _, st := range readStates(t) {
		recorded[stateKey(st.files)] = true
	}
	commits, err := exec.Command("git", "-C", "..", "log", "--first-parent", "--format=%h", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range strings.Fields(string(commits)) {
		files := map[migrations.Dialect]map[string]string{}
		for _, d := range []migrations.Dialect{migrations.SQLite, migrations.Postgres} {
			ls, err := exec.Command("git", "-C", "..", "ls-tree", "--name-only", c, "migrations/"+string(d)+"/").Output()
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range strings.Fields(string(ls)) {
				if !strings.HasSuffix(p, ".sql") {
					continue
				}
				b, err := exec.Command("git", "-C", "..", "show", c+":"+p).Output()
				if err != nil {
					t.Fatal(err)
				}
				if files[d] == nil {
					files[d] = map[string]string{}
				}
				files[d][filepath.Base(p)] = sum12(b)
			}
		}
		if len(files) == 0 {
			continue // before the store had migrations
		}
		if !recorded[stateKey(files)] {
			t.Errorf("the migrations of %s are not in %s/states.txt: run scripts/migration-history.sh", c, historyDir)
		}
	}
}

func stateKey(files map[migrations.Dialect]map[string]string) string {
	var parts []string
	for d, fs := range files {
		for name, sum := range fs {
			parts = append(parts, string(d)+"/"+name+"@"+sum)
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// schemaOf describes what a database's schema holds, in a form two
// databases of the same schema share: tables and their columns, indexes,
// constraints, triggers and functions — not goose's own table, and not the
// order ALTER TABLE left the columns in.
func schemaOf(t *testing.T, d migrations.Dialect, db *sql.DB) []string {
	t.Helper()
	var queries []string
	if d == migrations.Postgres {
		queries = []string{
			`SELECT 'column ' || table_name || '.' || column_name || ' ' || data_type || ' null=' || is_nullable
			 FROM information_schema.columns WHERE table_schema = current_schema() AND table_name <> 'goose_db_version'`,
			`SELECT 'index ' || indexname || ' ' || indexdef FROM pg_indexes
			 WHERE schemaname = current_schema() AND tablename <> 'goose_db_version'`,
			`SELECT 'constraint ' || conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid)
			 FROM pg_constraint WHERE connamespace = current_schema()::regnamespace AND conrelid::regclass::text NOT LIKE '%goose_db_version'`,
			`SELECT 'trigger ' || event_object_table || ' ' || trigger_name || ' ' || action_timing || ' ' || event_manipulation || ' ' || action_statement
			 FROM information_schema.triggers WHERE trigger_schema = current_schema()`,
			`SELECT 'function ' || proname || ' ' || pg_get_functiondef(oid) FROM pg_proc WHERE pronamespace = current_schema()::regnamespace`,
		}
	} else {
		queries = []string{
			`SELECT 'column ' || m.name || '.' || c.name || ' ' || c.type || ' notnull=' || c."notnull" || ' pk=' || c.pk
			 FROM sqlite_master m, pragma_table_info(m.name) c WHERE m.type = 'table' AND m.name NOT IN ('goose_db_version', 'sqlite_sequence')`,
			`SELECT 'index ' || m.name || ' ' || m.tbl_name || ' ' || coalesce(m.sql, 'auto') FROM sqlite_master m
			 WHERE m.type = 'index' AND m.tbl_name <> 'goose_db_version'`,
			`SELECT 'trigger ' || name || ' ' || sql FROM sqlite_master WHERE type = 'trigger'`,
		}
	}
	var schema string
	if d == migrations.Postgres {
		if err := db.QueryRow(`SELECT current_schema()`).Scan(&schema); err != nil {
			t.Fatal(err)
		}
	}
	space := regexp.MustCompile(`\s+`)
	var out []string
	for _, q := range queries {
		rows, err := db.Query(q)
		if err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			if schema != "" {
				s = strings.ReplaceAll(s, schema+".", "")
			}
			s = strings.ReplaceAll(space.ReplaceAllString(s, " "), " IF NOT EXISTS", "")
			out = append(out, s)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
	}
	slices.Sort(out)
	if len(out) < 50 {
		t.Fatalf("the schema has only %d parts: %v", len(out), out)
	}
	return out
}
