//go:build ignore

// sqlite.go is the raw SQLite floor for a checkpoint write:
//
//	go run ./scripts/floor/sqlite.go -clients 16 -duration 10s
//
// It creates a database in a temporary directory with the daemon's schema
// (the Up sections of migrations/sqlite/*.sql) and settings (WAL,
// synchronous=FULL, _txlock=immediate, one writer connection: store.Open),
// seeds one active session per client, and has every client run the
// transaction of store.WriteCheckpoint back to back — UPDATE sessions …
// RETURNING, INSERT the checkpoint (~3 KB document), INSERT the event — with
// prepared statements and nothing else: no HTTP, no JSON, no validation, no
// sealing (the document goes whole into the document column). It prints
//
//	floor sqlite clients=16 seconds=10 doc_bytes=3068 tps=3012.4 p50_ms=4.91 p99_ms=11.20
//
// The driver is the daemon's (modernc.org/sqlite), so the floor and the
// daemon pay the same engine.
package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite"
)

// The statements of store/checkpoints.go and store/events.go, verbatim.
const (
	advanceSession = `
UPDATE sessions SET
    checkpoint_seq = checkpoint_seq + 1,
    event_seq = event_seq + 1,
    updated_at = ?,
    pr = COALESCE(?, pr),
    branch = COALESCE(?, branch),
    worktree = COALESCE(?, worktree),
    head = ?
WHERE id = ? AND state = 'active' AND current_run_id = ? AND run_seq = ?
RETURNING checkpoint_seq, event_seq, repo, role, validity`
	insertCheckpoint = `
INSERT INTO checkpoints (session_id, seq, parent_seq, run_id, fencing_token, created_at, stage,
    branch, head, digest, redactions, complete, missing, document, sealed)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	insertEvent = `INSERT INTO events (session_id, seq, at, kind, run_id, data) VALUES (?, ?, ?, ?, ?, ?)`
)

const pragmas = "_pragma=busy_timeout(5000)&_pragma=foreign_keys(1)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate"

func main() {
	clients := flag.Int("clients", 16, "concurrent writers, each on its own session (1-256)")
	duration := flag.Duration("duration", 10*time.Second, "how long to write (at most 5m)")
	root := flag.String("root", ".", "the repository root (for migrations/ and testdata/)")
	flag.Parse()
	if *clients < 1 || *clients > 256 || *duration <= 0 || *duration > 5*time.Minute {
		fmt.Fprintln(os.Stderr, "sqlite floor: -clients must be 1-256 and -duration at most 5m")
		os.Exit(2)
	}
	if err := floor(*root, *clients, *duration); err != nil {
		fmt.Fprintln(os.Stderr, "sqlite floor:", err)
		os.Exit(1)
	}
}

func floor(root string, clients int, duration time.Duration) error {
	ddl, err := schema(filepath.Join(root, "migrations/sqlite"))
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(filepath.Join(root, "testdata/checkpoint-full.json"))
	if err != nil {
		return err
	}
	// The reference document on one line, as postgres.sh sends it.
	doc := strings.Join(strings.Fields(string(raw)), " ")

	dir, err := os.MkdirTemp("", "checkpointd-floor-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "floor.db")+"?"+pragmas)
	if err != nil {
		return err
	}
	defer db.Close()
	// One writer connection, as the daemon's store has: writers queue in Go.
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, ddl); err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	for i := 1; i <= clients; i++ {
		id := fmt.Sprint(i)
		if _, err := db.ExecContext(ctx, `INSERT INTO sessions (id, repo, repo_key, role, state, created_at, updated_at,
			current_run_id, run_seq, event_seq, validity_at) VALUES (?, 'acme/widgets', 'acme/widgets', 'author', 'active', 0, 0, ?, 1, 2, 0)`, id, id); err != nil {
			return fmt.Errorf("seed: %w", err)
		}
	}
	stmts := make([]*sql.Stmt, 3)
	for i, q := range []string{advanceSession, insertCheckpoint, insertEvent} {
		if stmts[i], err = db.PrepareContext(ctx, q); err != nil {
			return err
		}
		defer stmts[i].Close()
	}

	start := time.Now()
	deadline := start.Add(duration)
	lat := make([][]time.Duration, clients)
	errs := make([]error, clients)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			id := fmt.Sprint(c + 1)
			for time.Now().Before(deadline) {
				t0 := time.Now()
				if err := write(ctx, db, stmts, id, doc); err != nil {
					errs[c] = err
					return
				}
				lat[c] = append(lat[c], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	pct := func(p float64) float64 {
		i := min(max(int(p*float64(len(all))+0.5)-1, 0), len(all)-1)
		return float64(all[i]) / float64(time.Millisecond)
	}
	fmt.Printf("floor sqlite clients=%d seconds=%g doc_bytes=%d tps=%.1f p50_ms=%.2f p99_ms=%.2f\n",
		clients, duration.Seconds(), len(doc), float64(len(all))/elapsed.Seconds(), pct(0.50), pct(0.99))
	return nil
}

// write is WriteCheckpoint's transaction with the daemon's arguments.
func write(ctx context.Context, db *sql.DB, stmts []*sql.Stmt, id, doc string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	now := time.Now().UnixMicro()
	var seq, eseq int64
	var repo, role, validity string
	if err := tx.StmtContext(ctx, stmts[0]).QueryRowContext(ctx, now, 34, "fix-12-null-deref", "/srv/agents/w1/acme-widgets",
		"9fceb02d0ae598e95dc970b74767f19372d61af8", id, id, 1).Scan(&seq, &eseq, &repo, &role, &validity); err != nil {
		return fmt.Errorf("advance session %s: %w", id, err)
	}
	var parent any
	if seq > 1 {
		parent = seq - 1
	}
	digest := "hmac-sha256:v1:" + strings.Repeat("0", 64)
	if _, err := tx.StmtContext(ctx, stmts[1]).ExecContext(ctx, id, seq, parent, id, 1, now, "addressing_review", "fix-12-null-deref",
		"9fceb02d0ae598e95dc970b74767f19372d61af8", digest, 0, true, "[]", doc, ""); err != nil {
		return err
	}
	data := fmt.Sprintf(`{"seq":%d,"stage":"addressing_review","complete":true,"missing":[],"digest":%q}`, seq, digest)
	if _, err := tx.StmtContext(ctx, stmts[2]).ExecContext(ctx, id, eseq, now, "checkpoint.written", id, data); err != nil {
		return err
	}
	return tx.Commit()
}

// schema returns the goose Up sections of every migration in dir, in order:
// the schema exactly as the daemon migrates it.
func schema(dir string) (string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.sql"))
	if err != nil || len(files) == 0 {
		return "", fmt.Errorf("no migrations in %s (run from the repository root or pass -root)", dir)
	}
	slices.Sort(files)
	var ddl strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		_, up, ok := bytes.Cut(b, []byte("-- +goose Up"))
		if !ok {
			return "", fmt.Errorf("%s: no goose Up section", f)
		}
		up, _, _ = bytes.Cut(up, []byte("-- +goose Down"))
		ddl.Write(up)
	}
	return ddl.String(), nil
}
