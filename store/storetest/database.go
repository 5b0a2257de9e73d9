package storetest

import (
	"context"
	"database/sql"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Database is a PostgreSQL database of its own on the test server, which a
// test can make refuse every connection — as a server that went away — and
// let back, without touching the shared server or other tests' databases.
type Database struct {
	// URL connects to the database.
	URL string

	t     testing.TB
	name  string
	admin *sql.DB
}

// NewDatabase creates an empty database on the server of EnvURL, dropped
// when t ends.
func NewDatabase(t testing.TB) *Database {
	t.Helper()
	RequirePostgres(t)
	base := os.Getenv(EnvURL)
	admin, err := sql.Open("postgres", base)
	if err != nil {
		t.Fatal(err)
	}
	d := &Database{t: t, name: "t_" + randomHex(8), admin: admin}
	if _, err := admin.Exec("CREATE DATABASE " + d.name); err != nil {
		admin.Close()
		t.Fatalf("create database: %v", err)
	}
	if dir := os.Getenv(EnvMarker); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, d.name), []byte(t.Name()+"\n"), 0o644); err != nil {
			t.Fatalf("postgres marker: %v", err)
		}
	}
	t.Cleanup(func() {
		defer admin.Close()
		d.Allow()
		if _, err := admin.Exec("DROP DATABASE " + d.name + " WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", d.name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + d.name
	d.URL = u.String()
	return d
}

// Refuse makes the database refuse new connections and ends the ones
// open: every client of it finds the server gone.
func (d *Database) Refuse() {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := d.admin.ExecContext(ctx, "ALTER DATABASE "+d.name+" ALLOW_CONNECTIONS false"); err != nil {
		d.t.Fatalf("refuse connections: %v", err)
	}
	if _, err := d.admin.ExecContext(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, d.name); err != nil {
		d.t.Fatalf("end connections: %v", err)
	}
}

// Allow lets connections in again.
func (d *Database) Allow() {
	d.t.Helper()
	if _, err := d.admin.Exec("ALTER DATABASE " + d.name + " ALLOW_CONNECTIONS true"); err != nil {
		d.t.Errorf("allow connections: %v", err)
	}
}
