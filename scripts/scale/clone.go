package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
)

// cloneBatch is how many sessions one statement per table clones.
const cloneBatch = 400

// clone copies the template sessions, with their runs, checkpoints and
// events, until there are r.n sessions. A clone differs from its
// template in its session and run ids (the first 16 digits after ses_,
// what a table shows, unique), its repo (one in 1000 on rare/one, the
// others over 100 repos) and its branch. Each cloned checkpoint's free
// text is sealed again for its own row with the daemon's key file, so it
// reads back as the daemon's own: the drain's vouch pass and every read
// treat the clones as they would real sessions. The triggers that keep
// counts (active_sessions) see the inserts as any other.
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
	free, err := r.templateFreeText(ctx, db)
	if err != nil {
		return err
	}
	tables := []struct {
		name, join string
		set        map[string]string
	}{
		{"sessions", "t.id = m.tpl", map[string]string{"id": "m.sid", "current_run_id": "m.rid", "repo": "m.repo", "repo_key": "m.rkey", "branch": "m.branch"}},
		{"runs", "t.session_id = m.tpl", map[string]string{"id": "m.rid", "session_id": "m.sid"}},
		{"events", "t.session_id = m.tpl", map[string]string{"session_id": "m.sid", "run_id": "CASE WHEN t.run_id = '' THEN '' ELSE m.rid END"}},
		// One statement per seq (%d), each row with its own seal.
		{"checkpoints", "t.session_id = m.tpl AND t.seq = %d", map[string]string{"session_id": "m.sid", "run_id": "m.rid", "branch": "m.branch", "sealed": "m.sealed"}},
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
		type clone struct{ tpl, sid, rid, repo, branch string }
		var clones []clone
		for i := from; i < to; i++ {
			repo := fmt.Sprintf("fleet/repo-%d", i%100)
			if i%1000 == 999 {
				repo = "rare/one"
			}
			// A UUIDv7's shape: a millisecond, then a sequence, then the rest.
			hex := fmt.Sprintf("%012x7%03x%016x", base-int64(i), i%4096, uint64(i)*0x9e3779b97f4a7c15)
			clones = append(clones, clone{tpls[i%len(tpls)], "ses_" + hex, "run_" + hex, repo, fmt.Sprintf("fix-%d", i)})
		}
		var stmts []string
		var stmtArgs [][]any
		for _, ins := range inserts[:len(inserts)-1] {
			var rows []string
			var args []any
			for _, c := range clones {
				args = append(args, c.tpl, c.sid, c.rid, c.repo, c.repo, c.branch)
				rows = append(rows, "SELECT ? AS tpl, ? AS sid, ? AS rid, ? AS repo, ? AS rkey, ? AS branch")
			}
			stmts, stmtArgs = append(stmts, fmt.Sprintf(ins, strings.Join(rows, " UNION ALL "))), append(stmtArgs, args)
		}
		for _, seq := range free.seqs {
			var rows []string
			var args []any
			for _, c := range clones {
				text, ok := free.text[freeKey{c.tpl, seq}]
				if !ok {
					continue
				}
				sealed := ""
				if text != nil {
					sealed = free.keys.Seal(text, store.CheckpointAAD(c.sid, seq))
				}
				args = append(args, c.tpl, c.sid, c.rid, c.branch, sealed)
				rows = append(rows, "SELECT ? AS tpl, ? AS sid, ? AS rid, ? AS branch, ? AS sealed")
			}
			if len(rows) > 0 {
				ins := strings.Replace(inserts[len(inserts)-1], "%d", strconv.FormatInt(seq, 10), 1)
				stmts, stmtArgs = append(stmts, fmt.Sprintf(ins, strings.Join(rows, " UNION ALL "))), append(stmtArgs, args)
			}
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		for i, q := range stmts {
			if _, err := tx.ExecContext(ctx, r.rebind(q), stmtArgs[i]...); err != nil {
				tx.Rollback()
				return fmt.Errorf("%.60s…: %w", q, err)
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

// freeKey names a template checkpoint.
type freeKey struct {
	session string
	seq     int64
}

// freeText is the templates' checkpoints opened: the free text of each
// (nil where none was sealed), their seqs, and the keys to seal with.
type freeText struct {
	keys *checkpointd.Keyring
	text map[freeKey][]byte
	seqs []int64
}

// templateFreeText opens the templates' sealed free text with the key
// file the daemon made in the data directory.
func (r *run) templateFreeText(ctx context.Context, db *sql.DB) (freeText, error) {
	raw, err := os.ReadFile(filepath.Join(r.dir, "checkpointd.key"))
	if err != nil {
		return freeText{}, err
	}
	keys, err := checkpointd.ParseKeyring(string(raw))
	if err != nil {
		return freeText{}, err
	}
	f := freeText{keys: keys, text: map[freeKey][]byte{}}
	rows, err := db.QueryContext(ctx, `SELECT c.session_id, c.seq, c.sealed FROM checkpoints c JOIN sessions s ON s.id = c.session_id
WHERE s.state = 'active' ORDER BY c.seq`)
	if err != nil {
		return f, err
	}
	defer rows.Close()
	for rows.Next() {
		var k freeKey
		var sealed string
		if err := rows.Scan(&k.session, &k.seq, &sealed); err != nil {
			return f, err
		}
		var text []byte
		if sealed != "" {
			if text, err = keys.Open(sealed, store.CheckpointAAD(k.session, k.seq)); err != nil {
				return f, fmt.Errorf("template checkpoint %s/%d: %w", k.session, k.seq, err)
			}
		}
		f.text[k] = text
		if len(f.seqs) == 0 || f.seqs[len(f.seqs)-1] != k.seq {
			f.seqs = append(f.seqs, k.seq)
		}
	}
	return f, rows.Err()
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
