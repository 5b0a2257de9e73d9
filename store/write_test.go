package store

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/jmoiron/sqlx"
)

func openSQLite(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.Context(), Config{URL: filepath.Join(t.TempDir(), "checkpointd.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return s
}

func setting(t *testing.T, s *Store, name string) (string, bool) {
	t.Helper()
	m, err := s.Settings(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	v, ok := m[name]
	return v, ok
}

func put(name string) writeFunc {
	return func(ctx context.Context, tx *sqlx.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO settings (name, value) VALUES (?, 'v')`, name)
		return err
	}
}

// One batch, one commit: a job that fails or panics after writing rolls
// back alone, a job whose request gave up is skipped, the others land.
func TestGroupCommitIsolatesEachWrite(t *testing.T) {
	s := openSQLite(t)
	errRefused := errors.New("refused")
	gone, cancel := context.WithCancel(t.Context())
	cancel()
	ctx := t.Context()
	batch := []*groupJob{
		{ctx: ctx, fn: put("a")},
		{ctx: ctx, fn: func(ctx context.Context, tx *sqlx.Tx) error {
			if err := put("b")(ctx, tx); err != nil {
				return err
			}
			return errRefused
		}},
		{ctx: ctx, fn: func(ctx context.Context, tx *sqlx.Tx) error {
			if err := put("c")(ctx, tx); err != nil {
				return err
			}
			panic("boom")
		}},
		{ctx: gone, fn: put("d")},
		{ctx: ctx, fn: put("a")}, // duplicate key: a statement error
		{ctx: ctx, fn: put("e")},
	}
	for _, j := range batch {
		j.result = make(chan error, 1)
	}
	s.group.run(batch)
	want := []struct {
		err    error
		landed bool
		name   string
	}{{nil, true, "a"}, {errRefused, false, "b"}, {nil, false, "c"}, {context.Canceled, false, "d"}, {nil, true, "a"}, {nil, true, "e"}}
	for i, j := range batch {
		err := <-j.result
		switch i {
		case 2, 4:
			if err == nil {
				t.Errorf("job %d: no error, want its failure", i)
			}
		default:
			if !errors.Is(err, want[i].err) {
				t.Errorf("job %d: err %v, want %v", i, err, want[i].err)
			}
		}
		if _, ok := setting(t, s, want[i].name); ok != want[i].landed {
			t.Errorf("job %d: setting %q present %v, want %v", i, want[i].name, ok, want[i].landed)
		}
	}
}

// A batch that cannot commit answers every job with the failure: nothing
// is acknowledged that did not land.
func TestGroupCommitFailureAnswersEveryone(t *testing.T) {
	s := openSQLite(t)
	s.wdb.Close() // the writer is gone
	batch := []*groupJob{{ctx: t.Context(), fn: put("x")}, {ctx: t.Context(), fn: put("y")}}
	for _, j := range batch {
		j.result = make(chan error, 1)
	}
	s.group.run(batch)
	for i, j := range batch {
		if err := <-j.result; err == nil {
			t.Errorf("job %d acknowledged without a commit", i)
		}
	}
}

// After Close, a write is refused instead of hanging.
func TestGroupCommitClosed(t *testing.T) {
	s := openSQLite(t)
	s.group.close()
	if err := s.write(t.Context(), put("z")); !errors.Is(err, errStoreClosed) {
		t.Fatalf("write after close: %v, want errStoreClosed", err)
	}
}
