package api

import (
	"context"
	"log/slog"
	"sync"
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

// feedRetry is how long the reader waits after a failed read: the store is
// down, and every watcher waits for it with keep-alives meanwhile.
const feedRetry = time.Second

// feedHub is this replica's one feed reader: it reads each new change once
// from the database when woken (a commit here, a NOTIFY from any replica)
// and fans it out to the watchers' buffers. It never blocks on a watcher:
// a full buffer drops that watcher. It runs while there are watchers.
type feedHub struct {
	st      FeedStore
	log     *slog.Logger
	metrics *metrics.Metrics

	mu       sync.Mutex
	watchers map[*watcher]struct{}
	// pos is where the reader is: every change up to pos was fanned out to
	// the watchers joined then, every later one goes to every watcher.
	pos store.FeedPos
	// run is the current reader; nil while nobody watches.
	run *feedRun
}

type feedRun struct {
	cancel context.CancelFunc
}

// watcher is one stream's subscription.
type watcher struct {
	match func(store.FeedEvent) bool
	ch    chan store.FeedEvent
	// dropped is closed when the hub gave up on the watcher; reason says why.
	dropped chan struct{}
	reason  string
	once    sync.Once
}

func newWatcher(match func(store.FeedEvent) bool, buffer int) *watcher {
	return &watcher{match: match, ch: make(chan store.FeedEvent, buffer), dropped: make(chan struct{})}
}

func (w *watcher) drop(reason string) {
	w.once.Do(func() {
		w.reason = reason
		close(w.dropped)
	})
}

// join subscribes w and returns the hub's position: every change after it
// reaches w's buffer; what lies before it the caller reads itself.
func (h *feedHub) join(ctx context.Context, w *watcher) (store.FeedPos, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
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
	if h.watchers == nil {
		h.watchers = map[*watcher]struct{}{}
	}
	h.watchers[w] = struct{}{}
	h.metrics.SetWatchers(len(h.watchers))
	return h.pos, nil
}

// leave unsubscribes w; the last one out stops the reader.
func (h *feedHub) leave(w *watcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.watchers, w)
	h.metrics.SetWatchers(len(h.watchers))
	if len(h.watchers) == 0 && h.run != nil {
		h.run.cancel()
		h.run = nil
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
// as its backlog or all of them in its buffer. A watcher whose buffer is
// full is dropped, never waited for.
func (h *feedHub) fanOut(r *feedRun, evs []store.FeedEvent, next store.FeedPos) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.run != r {
		return false
	}
	for w := range h.watchers {
		select {
		case <-w.dropped:
			continue // nothing after a gap: its client resumes from what it has
		default:
		}
	events:
		for _, e := range evs {
			if !w.match(e) {
				continue
			}
			select {
			case w.ch <- e:
			default:
				w.drop(metrics.WatchSlowClient)
				break events
			}
		}
	}
	h.pos = next
	return true
}
