package migrations

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/pressly/goose/v3"
)

// repairVersion is the Go migration that brings a database migrated by an
// earlier build of main to today's schema where a migration file was
// edited after that build applied it (goose applies a version once, by
// number, and never looks at its text again). From it on, migrations are
// never edited: scripts/migration-history.sh archives every file version
// main ever had, and migrations/history_test.go upgrades from each.
const repairVersion = 24

// repairMigration is repairVersion for dialect d. Each step looks at the
// schema and changes only what differs, so it is a no-op on a database
// created by today's files.
func repairMigration(d Dialect) *goose.Migration {
	up := func(ctx context.Context, tx *sql.Tx) error {
		for _, step := range repairSteps(d) {
			if err := step.run(ctx, tx); err != nil {
				return fmt.Errorf("repair %s: %w", step.name, err)
			}
		}
		return nil
	}
	return goose.NewGoMigration(repairVersion, &goose.GoFunc{RunTx: up}, &goose.GoFunc{RunTx: func(context.Context, *sql.Tx) error { return nil }})
}

type repairStep struct {
	name string
	run  func(ctx context.Context, tx *sql.Tx) error
}

func repairSteps(d Dialect) []repairStep {
	steps := []repairStep{
		// 00003 gained leases.term (d3947db) after b6e26ee applied it.
		{"leases.term (00003)", func(ctx context.Context, tx *sql.Tx) error {
			cols, err := columns(ctx, tx, d, "leases")
			if err != nil || slices.Contains(cols, "term") {
				return err
			}
			// A lease's term is the TTL it was granted: its first expiry.
			def := " NOT NULL DEFAULT 0"
			if d == Postgres {
				def = ""
			}
			if _, err := tx.ExecContext(ctx, `ALTER TABLE leases ADD COLUMN term BIGINT`+def); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `UPDATE leases SET term = expires_at - acquired_at`); err != nil {
				return err
			}
			if d == Postgres {
				_, err = tx.ExecContext(ctx, `ALTER TABLE leases ALTER COLUMN term SET NOT NULL`)
			}
			return err
		}},
		// 00009's events_at gained (session_id, seq) in f25858c.
		{"events_at (00009)", func(ctx context.Context, tx *sql.Tx) error {
			cols, err := indexColumns(ctx, tx, d, "events_at")
			if err != nil || slices.Equal(cols, []string{"at", "session_id", "seq"}) {
				return err
			}
			if _, err := tx.ExecContext(ctx, `DROP INDEX IF EXISTS events_at`); err != nil {
				return err
			}
			_, err = tx.ExecContext(ctx, `CREATE INDEX events_at ON events (at, session_id, seq)`)
			return err
		}},
		// 00017 gained sessions_branch after bf25578 applied it.
		{"sessions_branch (00017)", func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `CREATE INDEX IF NOT EXISTS sessions_branch ON sessions (branch, id)`)
			return err
		}},
	}
	if d == Postgres {
		// 00019's function was rewritten four times while main applied
		// it, and 00025 replaced it and 00021's: today's definitions (the
		// functions of 00025, then 00035's single write, which records
		// the drain epoch) replace whichever the database has. Goose
		// applies this version after 00025 — and after 00035 — on a
		// database that had them before it had this one; installing
		// 00035's function before its column exists is fine (PL/pgSQL
		// resolves columns when it runs), and 00035 installs it again.
		steps = append(steps, repairStep{"checkpointd_write_checkpoint (00019, 00021, 00025, 00035)", func(ctx context.Context, tx *sql.Tx) error {
			var defs []string
			for _, name := range []string{"00025_write_checkpoint_checks_versions.sql", "00035_drain_epochs.sql"} {
				blocks, err := statementBlocks(Postgres, name)
				if err != nil {
					return err
				}
				defs = append(defs, blocks...)
			}
			for _, drop := range []string{`DROP FUNCTION IF EXISTS checkpointd_write_checkpoints`, `DROP FUNCTION IF EXISTS checkpointd_write_checkpoint`} {
				if _, err := tx.ExecContext(ctx, drop); err != nil {
					return err
				}
			}
			for _, def := range defs {
				if _, err := tx.ExecContext(ctx, def); err != nil {
					return err
				}
			}
			return nil
		}})
	}
	return steps
}

// columns lists a table's column names.
func columns(ctx context.Context, tx *sql.Tx, d Dialect, table string) ([]string, error) {
	q := `SELECT name FROM pragma_table_info(?)`
	if d == Postgres {
		q = `SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1`
	}
	return queryStrings(ctx, tx, q, table)
}

// indexColumns lists an index's key columns in order (none: no such index).
func indexColumns(ctx context.Context, tx *sql.Tx, d Dialect, index string) ([]string, error) {
	q := `SELECT name FROM pragma_index_info(?) ORDER BY seqno`
	if d == Postgres {
		q = `SELECT a.attname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
JOIN LATERAL unnest(i.indkey) WITH ORDINALITY k(attnum, n) ON TRUE
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
WHERE c.relname = $1 AND c.relnamespace = current_schema()::regnamespace ORDER BY k.n`
	}
	return queryStrings(ctx, tx, q, index)
}

func queryStrings(ctx context.Context, tx *sql.Tx, q string, arg any) ([]string, error) {
	rows, err := tx.QueryContext(ctx, q, arg)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// statementBlocks are the texts between a migration file's StatementBegin
// and StatementEnd annotations, in its Up section: statements that hold
// semicolons.
func statementBlocks(d Dialect, name string) ([]string, error) {
	b, err := fs.ReadFile(files, string(d)+"/"+name)
	if err != nil {
		return nil, err
	}
	up, _, _ := strings.Cut(string(b), "-- +goose Down")
	var blocks []string
	for {
		_, rest, ok := strings.Cut(up, "-- +goose StatementBegin\n")
		if !ok {
			break
		}
		block, after, ok := strings.Cut(rest, "-- +goose StatementEnd")
		if !ok {
			return nil, fmt.Errorf("%s: a StatementBegin without its StatementEnd", name)
		}
		blocks, up = append(blocks, block), after
	}
	if len(blocks) == 0 {
		return nil, fmt.Errorf("%s: no StatementBegin … StatementEnd block", name)
	}
	return blocks, nil
}
