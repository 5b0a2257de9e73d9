package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd"
)

// The gate vouches only for a latest checkpoint it can read back whole.
// The session row says a session is ready; the completion
// then checks, on the rows it locked, that the latest checkpoint of every
// session it is about to vouch for reads back as a read of it would
// (vouch: its document is the one written, its seal opens).
// A damaged one is marked on its session (unreadable_seq, migration
// 00013), which makes the session not ready and blocking as unknown until
// its next checkpoint, and the decision is taken again: it blocks. Only a
// completion pays for this, once per drain; the status and blocked
// decisions read rows alone.

// unreadableError stops a completion that found latest checkpoints it
// cannot read back: the session ids, with the seq found unreadable.
type unreadableError struct{ latest map[string]int64 }

func (e *unreadableError) Error() string {
	return fmt.Sprintf("%d latest checkpoints cannot be read back whole", len(e.latest))
}

// Unwrap makes a completion that keeps finding them fail closed.
func (e *unreadableError) Unwrap() error { return checkpointd.ErrStoreUnavailable }

// latestRef is a session and the seq of its latest checkpoint.
type latestRef struct {
	ID  string `db:"id"`
	Seq int64  `db:"seq"`
}

// readBacks checks the latest checkpoints a completion vouches for off
// its path: the completion fetches a chunk's documents, hands them over
// and goes on locking and recording the next chunk while GOMAXPROCS
// workers read them back; a queue of one chunk per worker bounds what is
// held in memory. wait says which did not read back.
type readBacks struct {
	s    *Store
	work chan []stored
	wg   sync.WaitGroup
	once sync.Once
	mu   sync.Mutex
	bad  map[string]int64
	err  error
}

func (s *Store) startReadBacks() *readBacks {
	n := runtime.GOMAXPROCS(0)
	r := &readBacks{s: s, work: make(chan []stored, n), bad: map[string]int64{}}
	for range n {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			for docs := range r.work {
				r.check(docs)
			}
		}()
	}
	return r
}

func (r *readBacks) check(docs []stored) {
	for _, d := range docs {
		err := r.s.vouch(d)
		if err == nil {
			continue
		}
		r.mu.Lock()
		if errors.Is(err, checkpointd.ErrCheckpointCorrupt) {
			r.bad[d.SessionID] = d.Seq
		} else if r.err == nil {
			r.err = err // no keys: nothing can be read, nothing is marked
		}
		r.mu.Unlock()
	}
}

// fetch reads the checkpoints latest names (each session's latest when
// it was read) and queues them; a session whose checkpoint is missing is
// unreadable. CROSS JOIN keeps SQLite's planner from scanning checkpoints
// once per pair (its stats favour that order; PostgreSQL reorders freely).
func (r *readBacks) fetch(ctx context.Context, q sqlx.ExtContext, latest []latestRef) error {
	if len(latest) == 0 {
		return nil
	}
	args := make([]any, 0, 2*len(latest))
	for _, l := range latest {
		args = append(args, l.ID, l.Seq)
	}
	var docs []stored
	if err := sqlx.SelectContext(ctx, q, &docs, q.Rebind(`WITH w (session_id, seq) AS (VALUES `+
		strings.Repeat("(?, CAST(? AS BIGINT)), ", len(latest)-1)+`(?, CAST(? AS BIGINT)))
SELECT c.session_id, c.seq, c.document, c.sealed, c.document_digest FROM w
CROSS JOIN checkpoints c WHERE c.session_id = w.session_id AND c.seq = w.seq`), args...); err != nil {
		return err
	}
	found := make(map[latestRef]bool, len(docs))
	for _, d := range docs {
		found[latestRef{ID: d.SessionID, Seq: d.Seq}] = true
	}
	r.mu.Lock()
	for _, l := range latest {
		if !found[l] {
			r.bad[l.ID] = l.Seq
		}
	}
	r.mu.Unlock()
	r.work <- docs
	return nil
}

// wait returns, once every queued chunk is read back, the sessions whose
// latest checkpoint did not read back, with its seq.
func (r *readBacks) wait() (map[string]int64, error) {
	r.stop()
	return r.bad, r.err
}

// stop ends the workers (after the queued chunks); safe to call twice.
func (r *readBacks) stop() {
	r.once.Do(func() { close(r.work) })
	r.wg.Wait()
}

const markUnreadable = `UPDATE sessions SET drain_ready = FALSE, unreadable_seq = ?
WHERE id = ? AND state = 'active' AND checkpoint_seq = ?`

// markUnreadable records on each session that its latest checkpoint (the
// seq found) cannot be read back, unless a newer one was written since.
func (s *Store) markUnreadable(ctx context.Context, latest map[string]int64) error {
	ids := slices.Sorted(maps.Keys(latest))
	s.log.ErrorContext(ctx, "drain: latest checkpoints cannot be read back whole; their sessions block as unknown",
		slog.Int("sessions", len(ids)), slog.Any("first", ids[:min(len(ids), 10)]))
	return s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
		for _, id := range ids { // in id order, as every lock of sessions
			if _, err := tx.ExecContext(ctx, tx.Rebind(markUnreadable), latest[id], id, latest[id]); err != nil {
				return err
			}
		}
		return nil
	})
}
