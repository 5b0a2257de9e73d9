package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/checkpointd/checkpointd/metrics"
	"github.com/checkpointd/checkpointd/store"
)

// FeedStore is what the change feed needs of persistence (store/feed.go).
type FeedStore interface {
	FeedHead(ctx context.Context) (store.FeedPos, error)
	ReadFeed(ctx context.Context, from, to store.FeedPos, limit int) ([]store.FeedEvent, store.FeedPos, bool, error)
	ParseFeedPos(ctx context.Context, id string, backlog time.Duration) (store.FeedPos, error)
	FeedWakeups(ctx context.Context) (<-chan struct{}, error)
}

// feedPage is how many events one feed read returns.
const feedPage = 500

// feedCoalesce is the least time between two reads of the feed: a busy
// feed is read in batches, a quiet one at once.
const feedCoalesce = 5 * time.Millisecond

// feedRetry is how long the reader waits after a failed read: the store is
// down, and every watcher waits for it with keep-alives meanwhile.
const feedRetry = time.Second

// feedHub is this replica's one feed reader: it reads each new change once
// from the database when woken (a commit here, a NOTIFY from any replica)
// and fans it out to the watchers' queues. It never blocks on a watcher,
// and what waits for watchers is bounded three ways (docs/watch.md): a
// stream's queue by count and bytes (past either, that watcher is dropped,
// slow_client), all queues together by bytes (past it, the watcher holding
// most is dropped, memory_budget), and the streams by number, per token and
// in all (past either, a new stream is refused with 429). It runs while
// there are watchers.
type feedHub struct {
	st      FeedStore
	log     *slog.Logger
	metrics *metrics.Metrics
	limits  watchLimits

	mu       sync.Mutex
	watchers map[*watcher]struct{}
	// bySession holds the watchers of one session; anyChange those with no
	// session filter: a change is offered to its session's and to those.
	bySession map[string]map[*watcher]struct{}
	anyChange map[*watcher]struct{}
	perToken  map[string]int
	// queued is the bytes waiting in every watcher's queue.
	queued atomic.Int64
	// pos is where the reader is: every change up to pos was fanned out to
	// the watchers joined then, every later one goes to every watcher.
	pos store.FeedPos
	// run is the current reader; nil while nobody watches.
	run *feedRun
}

// watchLimits bound what watchers may hold (defaults DefaultWatch…).
type watchLimits struct {
	queueEvents    int   // per stream
	queueBytes     int64 // per stream
	memory         int64 // every stream's queue together
	streams        int   // open streams on this replica
	streamsByToken int   // open streams of one token
}

type feedRun struct {
	cancel context.CancelFunc
}

// watcher is one stream's subscription: the queue the hub fills and the
// stream empties.
type watcher struct {
	match   func(store.FeedEvent) bool
	token   string
	session string // the stream's session filter, "" for none

	mu    sync.Mutex
	queue []*feedItem
	bytes int64
	// ready has a value while the queue may hold something.
	ready chan struct{}
	// dropped is closed when the hub gave up on the watcher; reason says why.
	dropped chan struct{}
	reason  string
	once    sync.Once
	// onDrop, when set, is called once the watcher is dropped: it ends a
	// write blocked on a client that stopped reading.
	onDrop func()
	hub    *feedHub // set by join, before anything is queued

}

func newWatcher(match func(store.FeedEvent) bool, token, session string) *watcher {
	return &watcher{match: match, token: token, session: session, ready: make(chan struct{}, 1), dropped: make(chan struct{})}
}

// feedItem is one change as the streams send it: encoded once, whatever
// the number of streams it goes to, and shared by their queues.
type feedItem struct {
	event store.FeedEvent
	frame []byte // the SSE frame: id, event and data lines
}

// cost is what the item counts against a queue's bounds: its frame, its
// data and the structs around them, as if no other queue shared it (the
// bound errs on the side of dropping).
func (it *feedItem) cost() int64 { return int64(len(it.frame)+len(it.event.Data)) + 256 }

// drop ends the watcher once: its queue is freed at once (nothing after a
// gap is ever sent), and a write blocked on its client is ended.
func (w *watcher) drop(reason string) {
	w.once.Do(func() {
		w.reason = reason
		close(w.dropped)
		w.mu.Lock()
		freed := w.bytes
		w.queue, w.bytes = nil, 0
		onDrop := w.onDrop
		w.mu.Unlock()
		w.hub.queued.Add(-freed)
		if onDrop != nil {
			onDrop()
		}
	})
}

// setOnDrop sets onDrop, calling it at once if the watcher is dropped
// already.
func (w *watcher) setOnDrop(f func()) {
	w.mu.Lock()
	w.onDrop = f
	w.mu.Unlock()
	select {
	case <-w.dropped:
		f()
	default:
	}
}

// push queues it, or drops the watcher when its queue is full. The caller
// holds the hub's lock.
func (w *watcher) push(it *feedItem, l watchLimits) {
	size := it.cost()
	w.mu.Lock()
	if len(w.queue) >= l.queueEvents || w.bytes+size > l.queueBytes {
		w.mu.Unlock()
		w.drop(metrics.WatchSlowClient)
		return
	}
	w.queue = append(w.queue, it)
	w.bytes += size
	w.mu.Unlock()
	w.hub.queued.Add(size)
	select {
	case w.ready <- struct{}{}:
	default:
	}
}

// take empties the queue and returns what it held, in order.
func (w *watcher) take() []*feedItem {
	w.mu.Lock()
	evs, freed := w.queue, w.bytes
	w.queue, w.bytes = nil, 0
	w.mu.Unlock()
	w.hub.queued.Add(-freed)
	return evs
}

// errTooManyWatchers refuses a stream past the caps (429).
var errTooManyWatchers = errors.New("too many watch streams")

// join subscribes w and returns the hub's position: every change after it
// reaches w's queue; what lies before it the caller reads itself. Past the
// caps it refuses (errTooManyWatchers) and w is not joined.
func (h *feedHub) join(ctx context.Context, w *watcher) (store.FeedPos, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case len(h.watchers) >= h.limits.streams:
		return store.FeedPos{}, fmt.Errorf("%w: this replica serves %d at most", errTooManyWatchers, h.limits.streams)
	case h.perToken[w.token] >= h.limits.streamsByToken:
		return store.FeedPos{}, fmt.Errorf("%w: a token may hold %d at once", errTooManyWatchers, h.limits.streamsByToken)
	}
	if h.run == nil {
		// Listen first, then read the head: a commit after the head wakes us.
		rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		wake, err := h.st.FeedWakeups(rctx)
		if err != nil {
			cancel()
			return store.FeedPos{}, err
		}
		head, err := h.st.FeedHead(ctx)
		if err != nil {
			cancel()
			return store.FeedPos{}, err
		}
		r := &feedRun{cancel: cancel}
		h.run, h.pos = r, head
		go h.read(rctx, r, wake)
	}
	w.hub = h
	h.add(w)
	h.metrics.SetWatchers(len(h.watchers))
	return h.pos, nil
}

// leave unsubscribes w and frees its queue; the last one out stops the
// reader.
func (h *feedHub) leave(w *watcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.watchers[w]; !ok {
		return
	}
	h.remove(w)
	w.take()
	h.metrics.SetWatchers(len(h.watchers))
	if len(h.watchers) == 0 && h.run != nil {
		h.run.cancel()
		h.run = nil
	}
}

// add and remove keep the watchers' indexes; the caller holds h.mu.
func (h *feedHub) add(w *watcher) {
	if h.watchers == nil {
		h.watchers, h.perToken = map[*watcher]struct{}{}, map[string]int{}
		h.bySession, h.anyChange = map[string]map[*watcher]struct{}{}, map[*watcher]struct{}{}
	}
	h.watchers[w] = struct{}{}
	h.perToken[w.token]++
	if w.session == "" {
		h.anyChange[w] = struct{}{}
		return
	}
	if h.bySession[w.session] == nil {
		h.bySession[w.session] = map[*watcher]struct{}{}
	}
	h.bySession[w.session][w] = struct{}{}
}

func (h *feedHub) remove(w *watcher) {
	delete(h.watchers, w)
	if h.perToken[w.token]--; h.perToken[w.token] <= 0 {
		delete(h.perToken, w.token)
	}
	delete(h.anyChange, w)
	if ws := h.bySession[w.session]; ws != nil {
		if delete(ws, w); len(ws) == 0 {
			delete(h.bySession, w.session)
		}
	}
}

// read is the reader loop of run r. It reads only after a wake-up, so an
// idle feed costs nothing; a failed read is retried after feedRetry.
func (h *feedHub) read(ctx context.Context, r *feedRun, wake <-chan struct{}) {
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-retry:
		}
		retry = nil
		if err := h.catchUp(ctx, r); err != nil {
			if ctx.Err() != nil {
				return
			}
			h.log.Warn("change feed read failed; retrying", slog.String("err", safeText(err.Error())))
			retry = time.After(feedRetry)
			continue
		}
		// Under a busy feed one read takes every commit of the last
		// feedCoalesce: a wake-up that came meanwhile stays pending.
		select {
		case <-ctx.Done():
			return
		case <-time.After(feedCoalesce):
		}
	}
}

// catchUp reads every change up to a fresh head and fans it out.
func (h *feedHub) catchUp(ctx context.Context, r *feedRun) error {
	to, err := h.st.FeedHead(ctx)
	if err != nil {
		return err
	}
	h.mu.Lock()
	pos := h.pos
	h.mu.Unlock()
	for {
		evs, next, more, err := h.st.ReadFeed(ctx, pos, to, feedPage)
		if err != nil {
			return err
		}
		if !h.fanOut(r, evs, next) {
			return nil // a newer reader took over
		}
		pos = next
		if !more {
			return nil
		}
	}
}

// fanOut hands evs to every watcher that wants them and moves the hub to
// next, in one critical section: a watcher joining sees either all of evs
// as its backlog or all of them in its queue. A watcher whose queue is
// full is dropped, never waited for; past the memory budget, so is the one
// holding most.
func (h *feedHub) fanOut(r *feedRun, evs []store.FeedEvent, next store.FeedPos) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.run != r {
		return false
	}
	// Event by event, to the watchers it may concern: each watcher still
	// gets its changes in order, and each change is encoded once, when a
	// stream first wants it.
	for _, e := range evs {
		var item *feedItem
		offer := func(ws map[*watcher]struct{}) {
			for w := range ws {
				if isClosed(w.dropped) || !w.match(e) {
					continue // nothing after a gap: its client resumes from what it has
				}
				if item == nil {
					item = &feedItem{event: e, frame: feedFrame(e)}
				}
				w.push(item, h.limits)
			}
		}
		if e.DrainID != "" { // a drain's change goes to every stream
			offer(h.watchers)
			continue
		}
		offer(h.anyChange)
		offer(h.bySession[e.SessionID])
	}
	for h.queued.Load() > h.limits.memory {
		var most *watcher
		var bytes int64
		for w := range h.watchers {
			w.mu.Lock()
			if w.bytes > bytes {
				most, bytes = w, w.bytes
			}
			w.mu.Unlock()
		}
		if most == nil {
			break
		}
		most.drop(metrics.WatchMemoryBudget)
	}
	h.pos = next
	return true
}
