package store

import (
	"context"
	"strings"
	"sync"

	"github.com/checkpointd/checkpointd"
)

// Moves counts sessions, not judgements: a session bound to a branch and
// to its PR is judged once per ref, and a reconcile pass may judge it
// again when a ref could not be answered, but it is one session that
// moved (or, back where it started, did not). A caller that wants to know
// what it changed tracks the moves in its context (TrackMoves); the store
// records there every validity change it commits while judging the
// tracked refs. Only committed transactions count: an attempt that rolled
// back is forgotten (inTx).
type Moves struct {
	parent *Moves
	refs   map[string]bool // repoKey + "\x00" + ref name

	mu      sync.Mutex
	pending []sessionMove
	first   map[string]checkpointd.Validity // session → validity before its first move
	last    map[string]checkpointd.Validity // session → validity after its last move
}

type sessionMove struct {
	id       string
	from, to checkpointd.Validity
}

type movesKey struct{}

// TrackMoves returns ctx carrying a fresh Moves for the refs, and the
// Moves. Tracking nests: a store call that tracks its own moves inside a
// caller's tracking reports to both.
func TrackMoves(ctx context.Context, refs []ActiveRef) (context.Context, *Moves) {
	m := &Moves{parent: movesFrom(ctx), refs: map[string]bool{},
		first: map[string]checkpointd.Validity{}, last: map[string]checkpointd.Validity{}}
	for _, r := range refs {
		m.refs[strings.ToLower(r.Repo)+"\x00"+r.Name()] = true
	}
	return context.WithValue(ctx, movesKey{}, m), m
}

func movesFrom(ctx context.Context) *Moves {
	m, _ := ctx.Value(movesKey{}).(*Moves)
	return m
}

// Counts returns how many sessions are now at each validity other than the
// one they had before their first tracked move.
func (m *Moves) Counts() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int{}
	for id, to := range m.last {
		if to != m.first[id] {
			out[string(to)]++
		}
	}
	return out
}

// noteMoves stages moves of sessions judged on repoKey's ref, for every
// tracking that covers the ref, until the transaction commits.
func noteMoves(ctx context.Context, repoKey, ref string, ids []string, from, to checkpointd.Validity) {
	if from == to {
		return
	}
	for m := movesFrom(ctx); m != nil; m = m.parent {
		if !m.refs[repoKey+"\x00"+ref] {
			continue
		}
		m.mu.Lock()
		for _, id := range ids {
			m.pending = append(m.pending, sessionMove{id, from, to})
		}
		m.mu.Unlock()
	}
}

// resetMoves forgets what an attempt staged; commitMoves keeps it.
func resetMoves(ctx context.Context) {
	for m := movesFrom(ctx); m != nil; m = m.parent {
		m.mu.Lock()
		m.pending = m.pending[:0]
		m.mu.Unlock()
	}
}

func commitMoves(ctx context.Context) {
	for m := movesFrom(ctx); m != nil; m = m.parent {
		m.mu.Lock()
		for _, mv := range m.pending {
			if _, seen := m.first[mv.id]; !seen {
				m.first[mv.id] = mv.from
			}
			m.last[mv.id] = mv.to
		}
		m.pending = m.pending[:0]
		m.mu.Unlock()
	}
}
