package main

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// cloneBatch is how many sessions one statement per table clones.
const cloneBatch = 400

// clone copies the template sessions, with their runs, checkpoints and
// events, until there are r.n sessions. A clone differs from its
// template in its session and run ids (the first 16 digits after ses_,
// what a table shows, unique), its repo (one in 1000 on rare/one, the
// others over 100 repos) and its branch. The triggers that keep counts
// (active_sessions) see the inserts as any other.
func (r *run) clone(ctx context.Context) error {
	db, err := r.open()
	if err != nil {
		return err
	}
	defer db.Close()
	var tpls []string
	if err := selectStrings(ctx, db, `SELECT id FROM sessions WHERE state = 'active' ORDER BY id`, &tpls); err != nil {
		return err
	}
	if len(tpls) == 0 {
		return errNoTemplates
	}
	tables := []struct {
		name, join string
		set        map[string]string
	}{
		{"sessions", "t.id = m.tpl", map[string]string{"id": "m.sid", "current_run_id": "m.rid", "repo": "m.repo", "repo_key": "m.rkey", "branch": "m.branch"}},
		{"runs", "t.session_id = m.tpl", map[string]string{"id": "m.rid", "session_id": "m.sid"}},
		{"checkpoints", "t.session_id = m.tpl", map[string]string{"session_id": "m.sid", "run_id": "m.rid", "branch": "m.branch"}},
		{"events", "t.session_id = m.tpl", map[string]string{"session_id": "m.sid", "run_id": "CASE WHEN t.run_id = '' THEN '' ELSE m.rid END"}},
	}
	inserts := make([]string, len(tables))
	for i, t := range tables {
		cols, err := columns(ctx, db, t.name)
		if err != nil {
			return err
		}
		var exprs []string
		var kept []string
		for _, c := range cols {
			// Not copied: PostgreSQL's change-feed order (the inserting
			// transaction's) and generated columns.
			if c == "xid" || c == "repo_owner" {
				continue
			}
			kept = append(kept, c)
			if e, ok := t.set[c]; ok {
				exprs = append(exprs, e)
			} else {
				exprs = append(exprs, "t."+c)
			}
		}
		inserts[i] = fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM %s t JOIN (%%s) m ON %s",
			t.name, strings.Join(kept, ", "), strings.Join(exprs, ", "), t.name, t.join)
	}
	base := time.Now().Add(-time.Hour).UnixMilli()
	for from := len(tpls); from < r.n; from += cloneBatch {
		to := min(from+cloneBatch, r.n)
		var rows []string
		var args []any
		for i := from; i < to; i++ {
			repo := fmt.Sprintf("fleet/repo-%d", i%100)
			if i%1000 == 999 {
				repo = "rare/one"
			}
			// A UUIDv7's shape: a millisecond, then a sequence, then the rest.
			hex := fmt.Sprintf("%012x7%03x%016x", base-int64(i), i%4096, uint64(i)*0x9e3779b97f4a7c15)
			args = append(args, tpls[i%len(tpls)], "ses_"+hex, "run_"+hex, repo, repo, fmt.Sprintf("fix-%d", i))
			rows = append(rows, "SELECT ? AS tpl, ? AS sid, ? AS rid, ? AS repo, ? AS rkey, ? AS branch")
		}
		mapping := strings.Join(rows, " UNION ALL ")
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		for _, ins := range inserts {
			if _, err := tx.ExecContext(ctx, r.rebind(fmt.Sprintf(ins, mapping)), args...); err != nil {
				tx.Rollback()
				return fmt.Errorf("%.60s…: %w", ins, err)
			}
		}
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	if r.backend == "postgres" {
		_, err = db.ExecContext(ctx, `VACUUM ANALYZE`)
	} else {
		_, err = db.ExecContext(ctx, `ANALYZE`)
	}
	return err
}

func (r *run) open() (*sql.DB, error) {
	if r.backend == "postgres" {
		return sql.Open("postgres", r.dbURL)
	}
	return sql.Open("sqlite", "file:"+filepath.Join(r.dir, "checkpointd.db")+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)")
}

// rebind turns ? into $1, $2, … for PostgreSQL.
func (r *run) rebind(q string) string {
	if r.backend != "postgres" {
		return q
	}
	var b strings.Builder
	n := 0
	for _, c := range q {
		if c == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

func columns(ctx context.Context, db *sql.DB, table string) ([]string, error) {
	rows, err := db.QueryContext(ctx, "SELECT * FROM "+table+" WHERE 1 = 0")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return rows.Columns()
}

func selectStrings(ctx context.Context, db *sql.DB, q string, out *[]string) error {
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
