package api

import (
	"testing"

	"github.com/checkpointd/checkpointd/store"
)

// TestFanOutSkipsDroppedWatchers: a watcher dropped for a full buffer gets
// nothing after its gap, even once its buffer has room again: a change
// handed on after a missed one would carry an id that resumes past it.
func TestFanOutSkipsDroppedWatchers(t *testing.T) {
	r := &feedRun{}
	h := &feedHub{watchers: map[*watcher]struct{}{}, run: r}
	w := newWatcher(func(store.FeedEvent) bool { return true }, 1)
	h.watchers[w] = struct{}{}
	ev := func(id string) store.FeedEvent { return store.FeedEvent{SessionID: id} }

	h.fanOut(r, []store.FeedEvent{ev("e1"), ev("e2")}, store.FeedPos{}) // e2 does not fit: dropped
	select {
	case <-w.dropped:
	default:
		t.Fatal("a full buffer did not drop the watcher")
	}
	if got := <-w.ch; got.SessionID != "e1" {
		t.Fatalf("buffered %v, want e1", got.SessionID)
	}
	h.fanOut(r, []store.FeedEvent{ev("e3")}, store.FeedPos{}) // room again, but after the gap
	select {
	case got := <-w.ch:
		t.Errorf("the dropped watcher was handed %s after its gap", got.SessionID)
	default:
	}
}
