package store_test

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// worker counts how many replicas run it at once.
type worker struct {
	running, most, starts atomic.Int32
	began                 chan string
}

func (w *worker) run(replica string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		n := w.running.Add(1)
		w.starts.Add(1)
		for {
			m := w.most.Load()
			if n <= m || w.most.CompareAndSwap(m, n) {
				break
			}
		}
		w.began <- replica
		<-ctx.Done()
		w.running.Add(-1)
		return nil
	}
}

// Two replicas on one PostgreSQL: the work runs in one of them; when that
// one stops, or its lock's connection dies, the other takes over.
func TestRunExclusiveOneReplicaAtATime(t *testing.T) {
	url := storetest.URL(t, storetest.Postgres)
	a := storetest.OpenURL(t, url, checkpointd.SystemClock{})
	b := storetest.OpenURL(t, url, checkpointd.SystemClock{})
	for _, s := range []*store.Store{a, b} {
		store.SetExclusiveTiming(s, 50*time.Millisecond, 50*time.Millisecond)
	}
	w := &worker{began: make(chan string, 4)}
	ctxA, stopA := context.WithCancel(t.Context())
	ctxB, stopB := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); a.RunExclusive(ctxA, "work", w.run("a")) }()
	first := <-w.began // a ran alone for a moment; now b competes
	go func() { defer wg.Done(); b.RunExclusive(ctxB, "work", w.run("b")) }()
	if first != "a" {
		t.Fatalf("first runner %q, want a", first)
	}
	time.Sleep(300 * time.Millisecond) // b retried several times meanwhile
	if got := w.starts.Load(); got != 1 {
		t.Fatalf("the work started %d times while a held the lock", got)
	}
	held, err := b.ExclusiveHeldElsewhere(t.Context(), "work")
	if err != nil || !held {
		t.Fatalf("ExclusiveHeldElsewhere = %v, %v while a holds it", held, err)
	}

	stopA()
	select {
	case r := <-w.began:
		if r != "b" {
			t.Fatalf("took over: %q, want b", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("b never took over after a stopped")
	}

	// b's lock connection dies: b's work is cancelled, and b (the only
	// replica left) takes the lock again on a new connection.
	admin, err := sql.Open("postgres", url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	// Only the holder of this test's lock (its key as store/exclusive.go
	// derives it): other tests' backends are left alone.
	res, err := admin.Exec(`WITH k AS (SELECT hashtextextended(current_schema() || ':checkpointd:work', 0) AS key)
SELECT pg_terminate_backend(l.pid) FROM pg_locks l, k
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
  AND l.classid::bigint = (k.key >> 32) & 4294967295 AND l.objid::bigint = k.key & 4294967295`)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("terminated %d lock holders, want 1", n)
	}
	select {
	case r := <-w.began:
		if r != "b" {
			t.Fatalf("after the connection died: %q ran, want b again", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the work did not restart after its lock connection died")
	}
	stopB()
	wg.Wait()
	if m := w.most.Load(); m != 1 {
		t.Fatalf("at most %d replicas ran the work at once, want 1", m)
	}
	if held, err := a.ExclusiveHeldElsewhere(t.Context(), "work"); err != nil || held {
		t.Fatalf("ExclusiveHeldElsewhere after both stopped = %v, %v", held, err)
	}
}

// SQLite has one daemon per file: the work runs at once, and nobody else
// holds its lock.
func TestRunExclusiveSQLite(t *testing.T) {
	s := storetest.Open(t, storetest.SQLite, checkpointd.SystemClock{})
	w := &worker{began: make(chan string, 1)}
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- s.RunExclusive(ctx, "work", w.run("only")) }()
	<-w.began
	if held, err := s.ExclusiveHeldElsewhere(t.Context(), "work"); err != nil || held {
		t.Fatalf("ExclusiveHeldElsewhere on SQLite = %v, %v", held, err)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
