package migrations_test

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/migrations"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

func names(t *testing.T, d migrations.Dialect) []string {
	t.Helper()
	fsys, err := migrations.FS(d)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func TestDialectsHaveTheSameMigrations(t *testing.T) {
	sqlite, pg := names(t, migrations.SQLite), names(t, migrations.Postgres)
	if len(sqlite) == 0 {
		t.Fatal("no migrations embedded")
	}
	if diff := cmp.Diff(sqlite, pg); diff != "" {
		t.Errorf("migration files differ between dialects (-sqlite +postgres):\n%s", diff)
	}
}

func dialect(b storetest.Backend) migrations.Dialect {
	if b == storetest.Postgres {
		return migrations.Postgres
	}
	return migrations.SQLite
}

func openDB(t *testing.T, b storetest.Backend, url string) *sql.DB {
	t.Helper()
	driver, dsn := "postgres", url
	if b == storetest.SQLite {
		driver, dsn = "sqlite", "file:"+url+"?_pragma=foreign_keys(1)"
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestUpgradeFromEveryVersion takes a database to each earlier version,
// fills it with the data a daemon of that version wrote (testdata/seed), and
// migrates it to the latest: the data must still read through the store.
func TestUpgradeFromEveryVersion(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := context.Background()
		// The latest version is the last file's number, not the count of
		// files: numbers are reserved per branch and may leave gaps.
		all := names(t, dialect(b))
		latest, err := strconv.ParseInt(strings.SplitN(all[len(all)-1], "_", 2)[0], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		latest = max(latest, migrations.RepairVersion) // the Go migration has no file
		for from := int64(0); from <= latest; from++ {
			url := storetest.URL(t, b)
			db := openDB(t, b, url)
			p, err := migrations.Provider(ctx, dialect(b), db)
			if err != nil {
				t.Fatal(err)
			}
			if from > 0 {
				if _, err := p.UpTo(ctx, from); err != nil {
					t.Fatalf("migrate to %d: %v", from, err)
				}
			}
			seeded := seed(t, db, from)
			got, err := migrations.Up(ctx, dialect(b), db)
			if err != nil {
				t.Fatalf("migrate %d → latest: %v", from, err)
			}
			if got != latest {
				t.Fatalf("version %d after migrating, want %d", got, latest)
			}
			if pending, err := migrations.Pending(ctx, dialect(b), db); err != nil || pending {
				t.Fatalf("pending after Up: %v %v", pending, err)
			}
			if seeded {
				checkSeed(t, url)
			}
		}
	})
}

// seed applies the seed written for version v, if there is one.
func seed(t *testing.T, db *sql.DB, v int64) bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "seed", strings.Repeat("0", 5-len(itoa(v)))+itoa(v)+".sql"))
	if os.IsNotExist(err) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range strings.Split(string(b), ";\n") {
		if strings.TrimSpace(stripComments(stmt)) == "" {
			continue
		}
		if _, err := db.Exec(stmt); err != nil {
			t.Fatalf("seed v%d: %v\n%s", v, err, stmt)
		}
	}
	return true
}

func stripComments(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "--") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func itoa(v int64) string {
	if v == 0 {
		return "0"
	}
	s := ""
	for ; v > 0; v /= 10 {
		s = string(rune('0'+v%10)) + s
	}
	return s
}

func checkSeed(t *testing.T, url string) {
	t.Helper()
	ctx := context.Background()
	s := storetest.OpenURL(t, url, checkpointd.SystemClock{})
	sess, err := s.GetSession(ctx, "ses_seed1")
	if err != nil {
		t.Fatalf("seeded session unreadable after migrating: %v", err)
	}
	if sess.Repo != "Acme/Widgets" || sess.PR != 34 || sess.CurrentRun == nil || sess.CurrentRun.ID != "run_seed1" ||
		sess.Latest == nil || sess.Latest.Seq != 2 {
		t.Fatalf("seeded session changed: %+v", sess)
	}
	// 00017: the stage column is backfilled from the latest checkpoint (a
	// stage filter finds the session); waiting_on and next_actor are sealed
	// in the document and stay empty until the next checkpoint.
	if staged, err := s.ListSessions(ctx, store.SessionFilter{Stage: "implementing", Limit: 10}); err != nil ||
		len(staged) != 1 || staged[0].ID != "ses_seed1" || staged[0].Latest.WaitingOn != "" || staged[0].Latest.NextActor != "" {
		t.Fatalf("stage=implementing after migrating: %+v %v", staged, err)
	}
	if planned, err := s.ListSessions(ctx, store.SessionFilter{Stage: "planned", Limit: 10}); err != nil || len(planned) != 0 {
		t.Fatalf("stage=planned (an older checkpoint's) after migrating: %+v %v", planned, err)
	}
	cp, err := s.GetCheckpoint(ctx, "ses_seed1", 1)
	if err != nil || cp.Stage != "planned" || cp.Digest != "hmac-sha256:v1:aa" {
		t.Fatalf("seeded checkpoint 1: %+v %v", cp, err)
	}
	evs, err := s.ListEvents(ctx, "ses_seed1", 0, 10)
	if err != nil || len(evs) != 4 {
		t.Fatalf("seeded events: %d %v", len(evs), err)
	}
	if fps, err := s.Settings(ctx, store.SettingKeyFingerprintPrefix); err != nil || fps["key_fingerprint:k1"] != "sha256:0011223344556677" {
		t.Fatalf("key fingerprints: %v %v", fps, err)
	}
	// Seeds from version 6 on: validity changes and drain decisions refer
	// to the checkpoint that was the latest when they were written.
	if evs, err := s.ListEvents(ctx, "ses_seed6", 0, 10); err == nil {
		var got []int64
		for _, e := range evs {
			ref := int64(-1)
			if e.CheckpointSeq != nil {
				ref = *e.CheckpointSeq
			}
			got = append(got, ref)
		}
		if diff := cmp.Diff([]int64{-1, -1, 1, 1, -1, 2}, got); diff != "" {
			t.Errorf("events' checkpoint refs after migrating (-want +got):\n%s", diff)
		}
	}
	// 00030: a session ended before keeps why and by whom, from its latest
	// session.ended event.
	if ended, err := s.GetSession(ctx, "ses_seed6e"); err == nil {
		if ended.EndReason != "host died" || ended.EndedBy != "alice" {
			t.Errorf("ended seed after migrating: reason %q by %q, want \"host died\" by \"alice\"", ended.EndReason, ended.EndedBy)
		}
	} else if !errors.Is(err, checkpointd.ErrNotFound) {
		t.Fatal(err)
	}
	// Retention goes through the checkpoints of upgraded sessions (their
	// marks start at 0, migration 00009): seed1's 1 goes, seed6's 1 stays
	// while an event refers to it and goes with that event.
	kept := func(id string) []int64 {
		sums, err := s.ListCheckpoints(ctx, id, 0, 10)
		if errors.Is(err, checkpointd.ErrNotFound) {
			return nil
		}
		if err != nil {
			t.Fatalf("ListCheckpoints %s: %v", id, err)
		}
		var out []int64
		for _, c := range sums {
			out = append(out, c.Seq)
		}
		slices.Sort(out)
		return out
	}
	_, seed6 := s.GetSession(ctx, "ses_seed6")
	for _, step := range []struct {
		p            store.Retention
		seed1, seed6 []int64
	}{
		{store.Retention{KeepCheckpoints: 1}, []int64{2}, []int64{1, 2}},
		{store.Retention{KeepCheckpoints: 1, EventAge: time.Hour}, []int64{2}, []int64{2}},
	} {
		if _, err := s.ApplyRetention(ctx, step.p); err != nil {
			t.Fatalf("retention after migrating: %v", err)
		}
		if diff := cmp.Diff(step.seed1, kept("ses_seed1")); diff != "" {
			t.Errorf("seed1 after retention %+v (-want +got):\n%s", step.p, diff)
		}
		if seed6 == nil {
			if diff := cmp.Diff(step.seed6, kept("ses_seed6")); diff != "" {
				t.Errorf("seed6 after retention %+v (-want +got):\n%s", step.p, diff)
			}
		}
	}
}
