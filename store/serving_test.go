package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestJoinServing: of replicas on one PostgreSQL, only one that starts while
// none serves runs the start-up work; one starting during that work waits
// for it and joins without repeating it; once every replica has left, the
// next start is first again.
func TestJoinServing(t *testing.T) {
	url := storetest.URL(t, storetest.Postgres)
	open := func() *store.Store { return storetest.OpenURL(t, url, checkpointd.SystemClock{}) }
	a, b, c := open(), open(), open()
	ctx := t.Context()

	release := make(chan struct{})
	inWork := make(chan struct{})
	type joined struct {
		first bool
		leave func()
		err   error
	}
	aDone := make(chan joined, 1)
	go func() {
		first, leave, err := a.JoinServing(ctx, func(context.Context) error {
			close(inWork)
			<-release
			return nil
		})
		aDone <- joined{first, leave, err}
	}()
	<-inWork
	bDone := make(chan joined, 1)
	go func() {
		first, leave, err := b.JoinServing(ctx, func(context.Context) error {
			t.Error("b ran the start-up work while a was doing it")
			return nil
		})
		bDone <- joined{first, leave, err}
	}()
	select {
	case j := <-bDone:
		t.Fatalf("b joined (%+v) while a's start-up work ran", j)
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	ja, jb := <-aDone, <-bDone
	if ja.err != nil || !ja.first || jb.err != nil || jb.first {
		t.Fatalf("a first=%v err=%v; b first=%v err=%v: want a first, b not", ja.first, ja.err, jb.first, jb.err)
	}

	ja.leave()
	ran := false
	first, leaveC, err := c.JoinServing(ctx, func(context.Context) error { ran = true; return nil })
	if err != nil || first || ran {
		t.Fatalf("c joined while b serves: first=%v ran=%v err=%v", first, ran, err)
	}
	jb.leave()
	leaveC()
	first, leaveA, err := a.JoinServing(ctx, func(context.Context) error { ran = true; return nil })
	if err != nil || !first || !ran {
		t.Fatalf("a rejoined after everyone left: first=%v ran=%v err=%v", first, ran, err)
	}
	leaveA()
}

// TestJoinServingFirstFails: start-up work that fails leaves the lock free,
// so the next start tries again.
func TestJoinServingFirstFails(t *testing.T) {
	storetest.Each(t, func(t *testing.T, be storetest.Backend) {
		s := storetest.Open(t, be, checkpointd.SystemClock{})
		boom := context.DeadlineExceeded
		if _, _, err := s.JoinServing(t.Context(), func(context.Context) error { return boom }); err != boom {
			t.Fatalf("JoinServing = %v, want the start-up work's error", err)
		}
		first, leave, err := s.JoinServing(t.Context(), func(context.Context) error { return nil })
		if err != nil || !first {
			t.Fatalf("after a failed start: first=%v err=%v", first, err)
		}
		leave()
	})
}

// TestJoinServingAfterAFailedStart: replicas waiting behind one whose
// start-up work failed find nobody serving; exactly one of them does the
// work, the other joins it.
func TestJoinServingAfterAFailedStart(t *testing.T) {
	url := storetest.URL(t, storetest.Postgres)
	open := func() *store.Store { return storetest.OpenURL(t, url, checkpointd.SystemClock{}) }
	a, b, c := open(), open(), open()
	ctx := t.Context()
	inWork, release := make(chan struct{}), make(chan struct{})
	aErr := make(chan error, 1)
	go func() {
		_, _, err := a.JoinServing(ctx, func(context.Context) error { close(inWork); <-release; return errors.New("reset failed") })
		aErr <- err
	}()
	<-inWork
	type joined struct {
		first, ran bool
		leave      func()
		err        error
	}
	waiters := make(chan joined, 2)
	for _, s := range []*store.Store{b, c} {
		go func() {
			ran := false
			first, leave, err := s.JoinServing(ctx, func(context.Context) error { ran = true; return nil })
			waiters <- joined{first, ran, leave, err}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	close(release)
	if err := <-aErr; err == nil {
		t.Fatal("a's failed start-up work was not reported")
	}
	firsts := 0
	for range 2 {
		j := <-waiters
		if j.err != nil {
			t.Fatal(j.err)
		}
		if j.first != j.ran {
			t.Fatalf("first=%v but the start-up work ran=%v", j.first, j.ran)
		}
		if j.first {
			firsts++
		}
		defer j.leave()
	}
	if firsts != 1 {
		t.Fatalf("%d of the two waiting replicas did the start-up work, want 1", firsts)
	}
}

// TestJoinServingRetakesALostLock: a replica whose lock connection died (a
// database restart) takes the lock again, so a replica starting later
// still finds it serving; and leaving does not hang.
func TestJoinServingRetakesALostLock(t *testing.T) {
	url := storetest.URL(t, storetest.Postgres)
	a := storetest.OpenURL(t, url, checkpointd.SystemClock{})
	c := storetest.OpenURL(t, url, checkpointd.SystemClock{})
	store.SetExclusiveTiming(a, time.Second, 100*time.Millisecond)
	ctx := t.Context()
	first, leaveA, err := a.JoinServing(ctx, func(context.Context) error { return nil })
	if err != nil || !first {
		t.Fatalf("a: first=%v err=%v", first, err)
	}
	raw := openRaw(t, storetest.Postgres, url)
	// Only the holder of this test's lock (its key as store/exclusive.go
	// derives it): other tests' backends are left alone.
	var killed int
	if err := raw.QueryRowContext(ctx, `WITH k AS (SELECT hashtextextended(current_schema() || ':checkpointd:serving', 0) AS key)
SELECT COUNT(pg_terminate_backend(l.pid)) FROM pg_locks l, k
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
  AND l.classid::bigint = (k.key >> 32) & 4294967295 AND l.objid::bigint = k.key & 4294967295`).Scan(&killed); err != nil || killed != 1 {
		t.Fatalf("terminated %d holders (%v), want 1", killed, err)
	}
	time.Sleep(600 * time.Millisecond) // a's keepalive notices and takes the lock again
	ran := false
	first, leaveC, err := c.JoinServing(ctx, func(context.Context) error { ran = true; return nil })
	if err != nil || first || ran {
		t.Fatalf("c while a serves: first=%v ran=%v err=%v", first, ran, err)
	}
	leaveC()
	left := make(chan struct{})
	go func() { leaveA(); close(left) }()
	select {
	case <-left:
	case <-time.After(5 * time.Second):
		t.Fatal("leaving hung")
	}
}

// TestJoinServingSlowStart: start-up work longer than the time the server
// gives a silent lock session does not lose the lock: a replica starting
// after it joins, not first.
func TestJoinServingSlowStart(t *testing.T) {
	url := storetest.URL(t, storetest.Postgres)
	a := storetest.OpenURL(t, url, checkpointd.SystemClock{})
	b := storetest.OpenURL(t, url, checkpointd.SystemClock{})
	store.SetExclusiveTiming(a, time.Second, 100*time.Millisecond) // the session expires after 400 ms of silence
	ctx := t.Context()
	first, leaveA, err := a.JoinServing(ctx, func(context.Context) error { time.Sleep(time.Second); return nil })
	if err != nil || !first {
		t.Fatalf("a: first=%v err=%v", first, err)
	}
	defer leaveA()
	time.Sleep(300 * time.Millisecond)
	first, leaveB, err := b.JoinServing(ctx, func(context.Context) error { return nil })
	if err != nil || first {
		t.Fatalf("b while a serves: first=%v err=%v", first, err)
	}
	leaveB()
}
