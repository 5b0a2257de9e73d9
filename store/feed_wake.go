package store

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lib/pq"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/migrations"
)

// FeedChannel is the PostgreSQL notification channel of the feed. Each
// replica notifies it after its commits (feed_notify.go); the payload is
// the schema, never data.
const FeedChannel = "checkpointd_feed"

// feedWaiters are this process's feed readers, woken after every commit:
// on SQLite that is all there is (one process owns the file); on
// PostgreSQL it spares the round trip through the server for the replica
// that wrote.
type feedWaiters struct {
	mu sync.Mutex
	// n mirrors len(chans), so a write with no watcher pays one atomic load.
	n     atomic.Int32
	chans map[chan struct{}]struct{}
}

func (f *feedWaiters) wake() {
	if f.n.Load() == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.chans {
		signal(c)
	}
}

func (f *feedWaiters) add(c chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.chans == nil {
		f.chans = map[chan struct{}]struct{}{}
	}
	f.chans[c] = struct{}{}
	f.n.Store(int32(len(f.chans)))
}

func (f *feedWaiters) remove(c chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.chans, c)
	f.n.Store(int32(len(f.chans)))
}

// signal sends on a one-slot channel without blocking: wake-ups coalesce.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// feedListenTimeout bounds the wait for the LISTEN connection.
const feedListenTimeout = 10 * time.Second

// feedPing is how often an idle LISTEN connection is checked: a dead one
// is noticed and reconnected, and the reconnection wakes the reader, which
// reads from its last position, so nothing is lost meanwhile.
var feedPing = 30 * time.Second

// feedPoll wakes a PostgreSQL reader even when no notification came: a
// replica sends its wake-up after its commit (feed_notify.go), so one that
// died in between, or whose NOTIFY failed, leaves its last commit to this.
var feedPoll = time.Second

// FeedWakeups returns a channel that receives (coalesced) after a commit
// that may have added to the feed: of this process, and on PostgreSQL of
// any replica (LISTEN on FeedChannel over its own connection; and every
// feedPoll in case a wake-up was lost). On return the listener is
// established: a commit after FeedWakeups returns wakes the channel. It
// stays open until ctx ends. Errors: ErrStoreUnavailable.
func (s *Store) FeedWakeups(ctx context.Context) (<-chan struct{}, error) {
	c := make(chan struct{}, 1)
	s.feed.add(c)
	if s.dialect != migrations.Postgres {
		context.AfterFunc(ctx, func() { s.feed.remove(c) })
		return c, nil
	}
	var schema string
	if err := s.rdb.GetContext(ctx, &schema, `SELECT current_schema()`); err != nil {
		s.feed.remove(c)
		return nil, s.classify(err)
	}
	l := pq.NewListener(s.url, 100*time.Millisecond, 5*time.Second, func(ev pq.ListenerEventType, err error) {
		if ev == pq.ListenerEventReconnected {
			signal(c) // what was written while disconnected
		}
		if ev == pq.ListenerEventDisconnected {
			s.connectionsLost()
		}
		if err != nil {
			s.log.Warn("feed listener", "event", int(ev), "error", err.Error())
		}
	})
	listened := make(chan error, 1)
	go func() { listened <- l.Listen(FeedChannel) }()
	var err error
	select {
	case err = <-listened:
	case <-time.After(feedListenTimeout):
		err = fmt.Errorf("no LISTEN connection after %s", feedListenTimeout)
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		// Close waits for a dial in progress, which a database that drops
		// packets can stall for minutes: never on the caller's path.
		go l.Close()
		s.feed.remove(c)
		return nil, fmt.Errorf("%w: feed listener: %w", checkpointd.ErrStoreUnavailable, err)
	}
	every := feedPoll // read here: a test may set it once this returns
	go func() {
		defer s.feed.remove(c)
		defer l.Close()
		ping := time.NewTicker(feedPing)
		defer ping.Stop()
		poll := time.NewTicker(every)
		defer poll.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-poll.C:
				signal(c)
			case n := <-l.Notify:
				// nil: the connection was re-established (also told above).
				if n == nil || n.Extra == schema {
					signal(c)
				}
			case <-ping.C:
				go l.Ping()
			}
		}
	}()
	return c, nil
}
