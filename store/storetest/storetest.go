// Package storetest opens real stores for tests: SQLite in a temporary
// directory, and PostgreSQL in a fresh schema of the server named by
// CHECKPOINTD_TEST_DATABASE_URL, dropped when the test ends.
package storetest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"testing"

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
		if _, err := admin.Exec("DROP SCHEMA " + schema + " CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
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
	s, err := store.Open(ctx, store.Config{URL: url, Clock: clock, Keys: Keys})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return s
}

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
