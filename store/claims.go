package store

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"
)

// What this process knows of its own claims (idempotency.go): which ones a
// request of it is still processing, and which ones it failed to release.

// inFlight is the set of claims whose requests this process is processing:
// from before the claim's row exists until the request's write returned or
// its claim was released. A claim of this incarnation outside it belongs to
// a request that ended, and a retry may take it over.
type inFlight struct {
	mu sync.Mutex
	m  map[string]struct{}
}

func (f *inFlight) start(claim string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[string]struct{}{}
	}
	f.m[claim] = struct{}{}
}

func (f *inFlight) end(claim string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, claim)
}

func (f *inFlight) has(claim string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.m[claim]
	return ok
}

// requestEnded marks the claim of a write as no longer processed, once the
// write returned, committed or not: completed, a retry replays it; not,
// a retry may take it over even if its release never reaches the store.
func (s *Store) requestEnded(idem *Idempotency) {
	if idem != nil {
		s.claims.end(idem.Claim)
	}
}

// maxPendingReleases bounds the releases kept for later. One that does not
// fit is still free for retries in this process, and for every replica
// once this process is gone or the claim TTL passed.
const maxPendingReleases = 1024

// releaseRetry is how often releases that failed are tried again while
// the store does not answer. Any write that commits meanwhile tries them
// at once.
const releaseRetry = time.Second

type pendingRelease struct{ scope, key, claim string }

// releases are the claims whose release failed because the store could not
// be reached: other replicas cannot tell such a claim's request ended from
// one still processing, so this process releases them as soon as the
// store answers again, on its next successful write or within releaseRetry.
type releases struct {
	mu      sync.Mutex
	pending []pendingRelease
	// waiting is len(pending) > 0, read on every commit without the lock.
	waiting atomic.Bool
	kick    chan struct{}
	stop    context.CancelFunc
	done    chan struct{}
}

// startReleases starts the goroutine that releases what failed to.
func (s *Store) startReleases() {
	ctx, cancel := context.WithCancel(context.Background())
	r := &s.releases
	r.kick, r.stop, r.done = make(chan struct{}, 1), cancel, make(chan struct{})
	go s.releaseLoop(ctx)
}

// stopReleases stops it; what is still pending is dropped with the
// process, whose claims then are free for everyone (incarnation.go).
func (s *Store) stopReleases() {
	if r := &s.releases; r.stop != nil {
		r.stop()
		<-r.done
	}
}

// queueRelease keeps a release that failed for later. It reports false
// when too many are kept already.
func (s *Store) queueRelease(p pendingRelease) bool {
	r := &s.releases
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pending) >= maxPendingReleases {
		return false
	}
	r.pending = append(r.pending, p)
	r.waiting.Store(true)
	r.signal()
	return true
}

func (r *releases) signal() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// committed is told of every write transaction that committed: the store
// answers again, so the releases that failed are made now; and the feed
// readers of this process look for new events.
func (s *Store) committed() {
	s.feed.wake()
	s.notifyFeed()
	if s.releases.waiting.Load() {
		s.releases.signal()
	}
}

func (s *Store) releaseLoop(ctx context.Context) {
	r := &s.releases
	defer close(r.done)
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		case <-retry:
		}
		retry = nil
		if err := s.releasePending(ctx); err != nil && ctx.Err() == nil {
			retry = time.After(releaseRetry)
		}
	}
}

// releasePending releases every kept claim in one transaction. Only this
// goroutine removes from the list, and only its head, so what was queued
// meanwhile stays.
func (s *Store) releasePending(ctx context.Context) error {
	r := &s.releases
	r.mu.Lock()
	batch := slices.Clone(r.pending)
	r.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	err := s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
		for _, p := range batch {
			if _, err := tx.ExecContext(ctx, tx.Rebind(releaseClaim), p.scope, p.key, p.claim); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending = r.pending[len(batch):]
	r.waiting.Store(len(r.pending) > 0)
	return nil
}
