package store

import (
	"strings"
	"sync"

	"github.com/checkpointd/checkpointd"
)

// Moves counts sessions, not judgements: a session bound to a branch and
// to its PR is judged once per ref, and a reconcile pass may judge it
// again when a ref could not be answered, but it is one session that
// moved (or, back where it started, did not). A caller that wants to know
// what it changed makes one for the refs it tracks (NewMoves) and hands it
// to the store calls (Observe, MarkUnverified); they record in it every
// validity change they commit while judging the tracked refs. Only
// committed transactions count (tell).
type Moves struct {
	refs map[string]bool // repoKey + "\x00" + ref name

	mu    sync.Mutex
	first map[string]checkpointd.Validity // session → validity before its first move
	last  map[string]checkpointd.Validity // session → validity after its last move
}

// NewMoves tracks the moves of the sessions judged on refs.
func NewMoves(refs []ActiveRef) *Moves {
	m := &Moves{refs: map[string]bool{}, first: map[string]checkpointd.Validity{}, last: map[string]checkpointd.Validity{}}
	for _, r := range refs {
		m.refs[strings.ToLower(r.Repo)+"\x00"+r.Name()] = true
	}
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

// commit records the committed moves on the tracked refs.
func (m *Moves) commit(moved []refMove) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, mv := range moved {
		if !m.refs[mv.repoKey+"\x00"+mv.ref] {
			continue
		}
		for _, id := range mv.ids {
			if _, seen := m.first[id]; !seen {
				m.first[id] = mv.from
			}
			m.last[id] = mv.to
		}
	}
}
