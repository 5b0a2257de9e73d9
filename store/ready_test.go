package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/migrations"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// bigDoc is a checkpoint whose write needs new pages: its note alone is
// larger than a page.
func bigDoc(run *checkpointd.Run, stage string) *checkpointd.Document {
	d := doc(run, stage)
	d.Note = strings.Repeat("a long note about what the run did. ", 300)
	return d
}

// eventually polls Ready until ok says its answer is the one wanted, for
// a few readiness TTLs.
func eventually(t *testing.T, s *store.Store, what string, ok func(error) bool) error {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := s.Ready(t.Context())
		if ok(err) {
			return err
		}
		if time.Now().After(deadline) {
			t.Fatalf("Ready is still %v; want %s", err, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReadyWhileWritesFail is the fault-injection test of readiness: with
// the database answering reads but failing every write that needs space
// (SQLite: a genuine SQLITE_FULL from a capped database; PostgreSQL:
// SQLSTATE 53100 disk_full on every table of the test's schema), Ready
// fails — at once after a failed write, and from its own probe write
// with no traffic — and it succeeds again once writes commit. Ready used
// to ping and read only, and answered nil throughout.
func TestReadyWhileWritesFail(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		url := storetest.URL(t, b)
		s := storetest.OpenURL(t, url, checkpointd.SystemClock{})
		sess := newSession(t, s, "owner/name")
		if _, err := write(ctx, s, sess.ID, bigDoc(sess.CurrentRun, "planning")); err != nil {
			t.Fatal(err)
		}
		if err := s.Ready(ctx); err != nil {
			t.Fatalf("Ready before the fault: %v", err)
		}

		var restore func() error
		if b == storetest.SQLite {
			var err error
			if restore, err = store.LimitPages(ctx, s); err != nil {
				t.Fatal(err)
			}
		} else {
			r := storetest.FailWrites(t, b, url)
			restore = func() error { r(); return nil }
		}
		_, err := write(ctx, s, sess.ID, bigDoc(sess.CurrentRun, "implementing"))
		if !errors.Is(err, checkpointd.ErrStoreUnavailable) {
			t.Fatalf("write with writes failing: %v, want ErrStoreUnavailable", err)
		}
		t.Logf("the write failed: %v", err)
		if _, err := s.GetSession(ctx, sess.ID); err != nil {
			t.Fatalf("reads must keep working for this test to mean anything: %v", err)
		}
		// At once: a write just failed.
		err = s.Ready(ctx)
		wantNotReady(t, err, store.ReasonWriteFailed)

		// With no traffic, past the TTL: Ready's own write fails.
		time.Sleep(store.ReadyTTL + 50*time.Millisecond)
		err = s.Ready(ctx)
		wantNotReady(t, err, store.ReasonWriteFailed)
		t.Logf("the probe failed: %v", err)

		if err := restore(); err != nil {
			t.Fatal(err)
		}
		eventually(t, s, "nil once writes commit", func(err error) bool { return err == nil })
		if _, err := write(ctx, s, sess.ID, bigDoc(sess.CurrentRun, "implementing")); err != nil {
			t.Fatalf("write after the fault: %v", err)
		}
	})
}

// TestReadyWhileFullOnItsOwnFreePages is readiness on a full SQLite
// database whose freelist holds only the pages the last probe freed (no
// VACUUM, as on a real full disk): every checkpoint write fails, and Ready
// must keep failing past the TTL. The probe used to write and delete its
// padding row, so the next probe reused its own freed pages and answered
// nil after one TTL while every checkpoint write still failed.
func TestReadyWhileFullOnItsOwnFreePages(t *testing.T) {
	ctx := t.Context()
	s := storetest.Open(t, storetest.SQLite, checkpointd.SystemClock{})
	sess := newSession(t, s, "owner/name")
	if _, err := write(ctx, s, sess.ID, bigDoc(sess.CurrentRun, "planning")); err != nil {
		t.Fatal(err)
	}
	if err := s.Ready(ctx); err != nil {
		t.Fatalf("Ready before the fault: %v", err)
	}
	free, err := store.FreePages(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if free == 0 {
		t.Fatal("the probe left no free pages: this test would mean nothing")
	}
	t.Logf("%d free pages after the probe", free)
	restore, err := store.CapPages(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := write(ctx, s, sess.ID, bigDoc(sess.CurrentRun, "implementing")); !errors.Is(err, checkpointd.ErrStoreUnavailable) {
			t.Fatalf("write %d on a full database: %v, want ErrStoreUnavailable", i, err)
		}
	}
	wantNotReady(t, s.Ready(ctx), store.ReasonWriteFailed)
	for i := range 3 { // past the TTL, with no traffic: the probe decides
		time.Sleep(store.ReadyTTL + 50*time.Millisecond)
		err := s.Ready(ctx)
		if err == nil {
			_, werr := write(ctx, s, sess.ID, bigDoc(sess.CurrentRun, "implementing"))
			t.Fatalf("Ready is nil %d TTLs after the failed writes, and a checkpoint write now: %v", i+1, werr)
		}
		wantNotReady(t, err, store.ReasonWriteFailed)
	}
	if _, err := write(ctx, s, sess.ID, bigDoc(sess.CurrentRun, "implementing")); !errors.Is(err, checkpointd.ErrStoreUnavailable) {
		t.Fatalf("a checkpoint write still on a full database: %v, want ErrStoreUnavailable", err)
	}

	if err := restore(); err != nil {
		t.Fatal(err)
	}
	eventually(t, s, "nil once there is room again", func(err error) bool { return err == nil })
	if _, err := write(ctx, s, sess.ID, bigDoc(sess.CurrentRun, "implementing")); err != nil {
		t.Fatalf("write after the fault: %v", err)
	}
}

func wantNotReady(t *testing.T, err error, reason string) {
	t.Helper()
	var nr *store.NotReadyError
	switch {
	case !errors.Is(err, checkpointd.ErrStoreUnavailable):
		t.Fatalf("Ready: %v, want ErrStoreUnavailable", err)
	case !errors.As(err, &nr) || nr.Reason != reason:
		t.Fatalf("Ready: %v, want reason %s", err, reason)
	}
}

// TestReadyProbesAreShared proves a storm of readiness checks costs the
// store one probe per TTL: concurrent callers share the one running, and
// later ones within the TTL get its answer.
func TestReadyProbesAreShared(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		s := storetest.Open(t, b, checkpointd.SystemClock{})
		before := store.ReadyProbes(s)
		errs := make(chan error, 64)
		for range cap(errs) {
			go func() { errs <- s.Ready(t.Context()) }()
		}
		for range cap(errs) {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		if n := store.ReadyProbes(s) - before; n != 1 {
			t.Errorf("%d probes for %d concurrent checks within the TTL, want 1", n, cap(errs))
		}
	})
}

// TestReadyIsBoundedWhenWritesHang proves Ready answers within its bound
// when a write cannot commit in time (another connection holds the write
// lock: SQLite's database lock, PostgreSQL's lock on the probed table),
// says so, and answers nil once the lock is gone.
func TestReadyIsBoundedWhenWritesHang(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		url := storetest.URL(t, b)
		s := storetest.OpenURL(t, url, checkpointd.SystemClock{})
		var release func()
		if b == storetest.SQLite {
			conn, err := openRaw(t, b, url).Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
				t.Fatal(err)
			}
			release = func() { conn.ExecContext(context.Background(), `ROLLBACK`); conn.Close() }
		} else {
			tx := holding(t, url, `LOCK TABLE settings IN ACCESS EXCLUSIVE MODE`)
			release = func() { tx.Rollback() }
		}
		start := time.Now()
		err := s.Ready(ctx)
		took := time.Since(start)
		release()
		wantNotReady(t, err, store.ReasonWriteTimeout)
		if took > store.ReadyProbeTimeout+time.Second {
			t.Errorf("Ready took %v, bound %v", took, store.ReadyProbeTimeout)
		}
		eventually(t, s, "nil once the lock is gone", func(err error) bool { return err == nil })
	})
}

// TestReadyMigrationsPending proves a database that lacks a migration of
// this binary is not ready, and says so.
func TestReadyMigrationsPending(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		url := storetest.URL(t, b)
		d := migrations.SQLite
		if b == storetest.Postgres {
			d = migrations.Postgres
		}
		p, err := migrations.Provider(ctx, d, openRaw(t, b, url))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.UpTo(ctx, 5); err != nil {
			t.Fatal(err)
		}
		s, err := store.Open(ctx, store.Config{URL: url, Keys: storetest.Keys})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		wantNotReady(t, s.Ready(ctx), store.ReasonMigrationsPending)
	})
}
