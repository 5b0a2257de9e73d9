// Package migrations holds the versioned, forward-only schema of both store
// backends, embedded in the binary, and applies it with goose.
//
// Each dialect has its own folder with the same file names (a test checks
// the parity): the engines differ in a few types, never in meaning.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"hash/fnv"
	"io/fs"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed sqlite/*.sql postgres/*.sql
var files embed.FS

// Dialect names a store backend.
type Dialect string

// Supported dialects.
const (
	SQLite   Dialect = "sqlite"
	Postgres Dialect = "postgres"
)

// FS returns the migration files of one dialect.
func FS(d Dialect) (fs.FS, error) {
	switch d {
	case SQLite, Postgres:
		return fs.Sub(files, string(d))
	}
	return nil, fmt.Errorf("migrations: unknown dialect %q", d)
}

// Provider returns a goose provider for db. On PostgreSQL it takes a session
// advisory lock keyed by the current schema, so several replicas starting at
// once migrate exactly once (and test schemas do not wait on each other).
func Provider(ctx context.Context, d Dialect, db *sql.DB) (*goose.Provider, error) {
	fsys, err := FS(d)
	if err != nil {
		return nil, err
	}
	// Out of order: branches reserve their numbers, so a database an
	// earlier build of main migrated can lack a version below its highest
	// (00009 below 00010, 00013 below 00014); each applies on its own, and
	// migrations/history_test.go proves it from every schema main had.
	opts := []goose.ProviderOption{goose.WithAllowOutofOrder(true), goose.WithGoMigrations(repairMigration(d)),
		goose.WithDisableGlobalRegistry(true)}
	dialect := goose.DialectSQLite3
	if d == Postgres {
		dialect = goose.DialectPostgres
		var schema string
		if err := db.QueryRowContext(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
			return nil, fmt.Errorf("migrations: read current schema: %w", err)
		}
		h := fnv.New64a()
		h.Write([]byte("checkpointd.migrate:" + schema))
		locker, err := lock.NewPostgresSessionLocker(
			lock.WithLockID(int64(h.Sum64()>>1)),
			lock.WithLockTimeout(1, 300),
		)
		if err != nil {
			return nil, err
		}
		opts = append(opts, goose.WithSessionLocker(locker))
	}
	return goose.NewProvider(dialect, db, fsys, opts...)
}

// Up applies every pending migration and returns the resulting version.
func Up(ctx context.Context, d Dialect, db *sql.DB) (int64, error) {
	p, err := Provider(ctx, d, db)
	if err != nil {
		return 0, err
	}
	if _, err := p.Up(ctx); err != nil {
		return 0, fmt.Errorf("migrations: up: %w", err)
	}
	return p.GetDBVersion(ctx)
}

// Pending reports whether db lacks migrations this binary has.
func Pending(ctx context.Context, d Dialect, db *sql.DB) (bool, error) {
	p, err := Provider(ctx, d, db)
	if err != nil {
		return false, err
	}
	return p.HasPending(ctx)
}
