package store_test

import (
	"context"
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
