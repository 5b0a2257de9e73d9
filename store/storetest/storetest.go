// Package storetest opens real stores for tests: SQLite in a temporary
// directory, and PostgreSQL in a fresh schema of the server named by
// CHECKPOINTD_TEST_DATABASE_URL, dropped when the test ends.
package storetest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/lib/pq"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
)

// EnvURL names the PostgreSQL server the tests use. EnvRequire makes a
// missing server a failure instead of a skip; CI sets it.
// EnvMarker names a directory where every PostgreSQL test database leaves a
// file, so CI can prove the PostgreSQL half ran rather than skipped.
const (
	EnvURL     = "CHECKPOINTD_TEST_DATABASE_URL"
	EnvRequire = "CHECKPOINTD_TEST_REQUIRE_POSTGRES"
	EnvMarker  = "CHECKPOINTD_TEST_POSTGRES_MARKER"
)

// Backend is one database engine the conformance suite runs on.
type Backend string

// The backends.
const (
	SQLite   Backend = "sqlite"
	Postgres Backend = "postgres"
)

// Each runs fn as a subtest per backend, skipping (or failing, under
// EnvRequire) PostgreSQL when no server is configured.
func Each(t *testing.T, fn func(t *testing.T, b Backend)) {
	t.Helper()
	for _, b := range []Backend{SQLite, Postgres} {
		t.Run(string(b), func(t *testing.T) {
			if b == Postgres {
				RequirePostgres(t)
			}
			fn(t, b)
		})
	}
}

// RequirePostgres skips t when no PostgreSQL is configured, or fails it when
// EnvRequire is set.
func RequirePostgres(t testing.TB) {
	t.Helper()
	if os.Getenv(EnvURL) == "" {
		if os.Getenv(EnvRequire) != "" {
			t.Fatalf("%s is required but unset", EnvURL)
		}
		t.Skipf("%s unset: PostgreSQL half skipped", EnvURL)
	}
}

// URL returns a database URL for a fresh, empty database of backend b that
// lives as long as t: a file in t.TempDir(), or a new PostgreSQL schema.
func URL(t testing.TB, b Backend) string {
	t.Helper()
	if b == SQLite {
		return filepath.Join(t.TempDir(), "checkpointd.db")
	}
	RequirePostgres(t)
	base := os.Getenv(EnvURL)
	admin, err := sql.Open("postgres", base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	schema := "t_" + randomHex(8)
	if _, err := admin.Exec("CREATE SCHEMA " + schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	if dir := os.Getenv(EnvMarker); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, schema), []byte(t.Name()+"\n"), 0o644); err != nil {
			t.Fatalf("postgres marker: %v", err)
		}
	}
	t.Cleanup(func() {
		// Work the test left running in the background (a drain's notes
		// detach from their request) may still hold locks: the drop can
		// lose a deadlock to it, and is tried again.
		var err error
		for range 20 {
			if _, err = admin.Exec("DROP SCHEMA " + schema + " CASCADE"); err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("drop schema %s: %v", schema, err)
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// Open returns a migrated store on a fresh database of backend b.
func Open(t testing.TB, b Backend, clock checkpointd.Clock) *store.Store {
	t.Helper()
	return OpenURL(t, URL(t, b), clock)
}

// OpenURL opens and migrates a store at url, closed when t ends.
func OpenURL(t testing.TB, url string, clock checkpointd.Clock) *store.Store {
	t.Helper()
	ctx := context.Background()
	s, err := store.Open(ctx, store.Config{URL: url, Clock: clock, Keys: Keys, MaxConns: MaxConns})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return s
}

// MaxConns bounds each test store's PostgreSQL pool: the packages' tests
// run at once against one server, with several stores (replicas) each,
// within its max_connections.
const MaxConns = 8

// Keys is the keyring test stores seal with: fixed, so tests can open what
// another test store sealed.
var Keys = func() *checkpointd.Keyring {
	kr, err := checkpointd.ParseKeyring("k1 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=")
	if err != nil {
		panic(err)
	}
	return kr
}()

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// FailWrites makes every write to the database at url fail until the
// returned restore is called (or t ends), while reads keep working: the
// shape of a full disk. It works from outside the store under test, on
// its own connection: on PostgreSQL a statement trigger on every table of
// the test's schema raises SQLSTATE 53100 disk_full (what a full disk
// raises); on SQLite row triggers abort every insert, update and delete
// with "database or disk is full". Nothing outside the test's own schema
// or file is touched.
func FailWrites(t testing.TB, b Backend, url string) (restore func()) {
	t.Helper()
	ctx := context.Background()
	var db *sql.DB
	var err error
	var tables []string
	var create, drop []string
	if b == SQLite {
		db, err = sql.Open("sqlite", "file:"+url+"?_pragma=busy_timeout(10000)")
		if err != nil {
			t.Fatal(err)
		}
		err = selectStrings(ctx, db, &tables, `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'`)
		for _, tbl := range tables {
			for _, op := range []string{"INSERT", "UPDATE", "DELETE"} {
				trg := fmt.Sprintf(`"fail_writes_%s_%s"`, tbl, op)
				create = append(create, fmt.Sprintf(`CREATE TRIGGER %s BEFORE %s ON "%s" BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END`, trg, op, tbl))
				drop = append(drop, "DROP TRIGGER "+trg)
			}
		}
	} else {
		db, err = sql.Open("postgres", url)
		if err != nil {
			t.Fatal(err)
		}
		var schema string
		if err = db.QueryRowContext(ctx, `SELECT current_schema()`).Scan(&schema); err == nil && !strings.HasPrefix(schema, "t_") {
			err = fmt.Errorf("FailWrites: %q is not a test schema", schema)
		}
		if err == nil {
			err = selectStrings(ctx, db, &tables, `SELECT tablename FROM pg_tables WHERE schemaname = current_schema()`)
		}
		create = append(create, `CREATE FUNCTION fail_writes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'could not extend file: No space left on device' USING ERRCODE = 'disk_full'; END $$`)
		for _, tbl := range tables {
			create = append(create, fmt.Sprintf(`CREATE TRIGGER fail_writes BEFORE INSERT OR UPDATE OR DELETE ON "%s" FOR EACH STATEMENT EXECUTE FUNCTION fail_writes()`, tbl))
			drop = append(drop, fmt.Sprintf(`DROP TRIGGER fail_writes ON "%s"`, tbl))
		}
		drop = append(drop, `DROP FUNCTION fail_writes()`)
	}
	if err == nil && len(tables) == 0 {
		err = errors.New("FailWrites: no tables (is the database migrated?)")
	}
	for _, q := range create {
		if err != nil {
			break
		}
		_, err = db.ExecContext(ctx, q)
	}
	if err != nil {
		db.Close()
		t.Fatalf("fail writes: %v", err)
	}
	var once sync.Once
	restore = func() {
		once.Do(func() {
			defer db.Close()
			for _, q := range drop {
				if _, err := db.ExecContext(ctx, q); err != nil {
					t.Errorf("restore writes: %v", err)
					return
				}
			}
		})
	}
	t.Cleanup(restore)
	return restore
}

func selectStrings(ctx context.Context, db *sql.DB, out *[]string, q string) error {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return err
		}
		*out = append(*out, s)
	}
	return rows.Err()
}
