package api

import (
	"testing"

	"github.com/checkpointd/checkpointd/store"
)

// TestFanOutSkipsDroppedWatchers: a watcher dropped for a full queue gets
// nothing after its gap, even once its queue has room again: a change
// handed on after a missed one would carry an id that resumes past it.
func TestFanOutSkipsDroppedWatchers(t *testing.T) {
	r := &feedRun{}
	h := &feedHub{run: r, limits: watchLimits{queueEvents: 1, queueBytes: 1 << 20, memory: 1 << 20, streams: 10, streamsByToken: 10}}
	w := newWatcher(func(store.FeedEvent) bool { return true }, "tok", "")
	w.hub = h
	h.add(w)
	ev := func(id string) store.FeedEvent { return store.FeedEvent{SessionID: id} }

	h.fanOut(r, []store.FeedEvent{ev("e1")}, store.FeedPos{})
	if got := w.take(); len(got) != 1 || got[0].event.SessionID != "e1" {
		t.Fatalf("queued %v, want e1", got)
	}
	h.fanOut(r, []store.FeedEvent{ev("e2"), ev("e3")}, store.FeedPos{}) // e3 does not fit: dropped
	select {
	case <-w.dropped:
	default:
		t.Fatal("a full queue did not drop the watcher")
	}
	if got := w.take(); len(got) != 0 {
		t.Errorf("a dropped watcher's queue still holds %v: it is freed at the drop", got)
	}
	h.fanOut(r, []store.FeedEvent{ev("e4")}, store.FeedPos{}) // room again, but after the gap
	if got := w.take(); len(got) != 0 {
		t.Errorf("the dropped watcher was handed %v after its gap", got)
	}
	if q := h.queued.Load(); q != 0 {
		t.Errorf("%d bytes still counted as queued", q)
	}
}

// TestMemoryBudgetDropsTheLargest: past the budget of every queue
// together, the watcher holding most is dropped (memory_budget) and its
// bytes are freed; one that keeps up is untouched.
func TestMemoryBudgetDropsTheLargest(t *testing.T) {
	r := &feedRun{}
	h := &feedHub{run: r, limits: watchLimits{queueEvents: 1000, queueBytes: 1 << 20, memory: 8 << 10, streams: 10, streamsByToken: 10}}
	all := func(store.FeedEvent) bool { return true }
	stalled, keeping := newWatcher(all, "a", ""), newWatcher(all, "b", "")
	for _, w := range []*watcher{stalled, keeping} {
		w.hub = h
		h.add(w)
	}
	data := make([]byte, 1000)
	for i := range 12 {
		h.fanOut(r, []store.FeedEvent{{SessionID: "s", Data: data}}, store.FeedPos{})
		keeping.take() // reads as fast as it is fed
		if i < 5 && isClosed(stalled.dropped) {
			t.Fatalf("dropped after %d events, within the budget", i+1)
		}
	}
	if !isClosed(stalled.dropped) || stalled.reason != "memory_budget" {
		t.Fatalf("the stalled watcher: dropped %v, reason %q", isClosed(stalled.dropped), stalled.reason)
	}
	if isClosed(keeping.dropped) {
		t.Errorf("the watcher that keeps up was dropped (%s)", keeping.reason)
	}
	if q := h.queued.Load(); q != 0 {
		t.Errorf("%d bytes still counted as queued after the drop", q)
	}
}
