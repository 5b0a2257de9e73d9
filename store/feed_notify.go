package store

import (
	"context"
	"sync"
	"time"

	"github.com/checkpointd/checkpointd/migrations"
)

// feedNotifyGap is the least time between two wake-ups a replica sends:
// under load one NOTIFY covers the commits of a few milliseconds.
const feedNotifyGap = 5 * time.Millisecond

// feedNotifyTimeout bounds one wake-up; a failed one is not retried, the
// next commit sends another and readers poll (feedPoll).
const feedNotifyTimeout = 5 * time.Second

// feedNotify is the NOTIFY that wakes the other replicas' feed readers.
// It runs in a transaction of its own that writes nothing durable, so its
// commit need not wait for the disk.
const feedNotify = `SET LOCAL synchronous_commit = off; SELECT pg_notify('` + FeedChannel + `', current_schema())`

// feedNotifier tells the feed readers of every replica that this one
// committed (PostgreSQL). The NOTIFY is sent after the commit, not inside
// the writing transaction: there PostgreSQL serialises every notifying
// commit of the database behind one lock held until the commit is on
// disk, which cost the write path more than half its throughput at 16
// writers (migration 00020). A reader hears of a commit at most
// feedNotifyGap plus a round trip after it; one whose wake-up was lost
// (this process died between its commit and the NOTIFY, the connection
// failed) is read by the next wake-up or the reader's poll.
type feedNotifier struct {
	once sync.Once
	kick chan struct{}
	stop context.CancelFunc
	done chan struct{}
}

// notifyFeed asks for a wake-up of the other replicas' feed readers.
func (s *Store) notifyFeed() {
	if s.dialect != migrations.Postgres {
		return
	}
	n := &s.notifier
	n.once.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		n.kick, n.stop, n.done = make(chan struct{}, 1), cancel, make(chan struct{})
		go s.feedNotifyLoop(ctx)
	})
	signal(n.kick)
}

func (s *Store) feedNotifyLoop(ctx context.Context) {
	n := &s.notifier
	defer close(n.done)
	for {
		select {
		case <-n.kick:
		case <-ctx.Done():
			return
		}
		nctx, cancel := context.WithTimeout(ctx, feedNotifyTimeout)
		if _, err := s.wdb.ExecContext(nctx, feedNotify); err != nil && ctx.Err() == nil {
			s.log.Warn("feed wake-up not sent; readers poll", "error", err.Error())
		}
		cancel()
		select {
		case <-time.After(feedNotifyGap):
		case <-ctx.Done():
			return
		}
	}
}

// stopFeedNotifier sends what is pending and stops.
func (s *Store) stopFeedNotifier() {
	n := &s.notifier
	n.once.Do(func() {}) // none started: none may start
	if n.stop == nil {
		return
	}
	select {
	case <-n.kick:
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, _ = s.wdb.ExecContext(ctx, feedNotify)
		cancel()
	default:
	}
	n.stop()
	<-n.done
}
