package api

import (
	"net/http"

	"github.com/checkpointd/checkpointd"
)

// listDrains answers every drain, newest first, bounded like every list:
// what an operator looks back on (the console's past drains).
func (a *api) listDrains(w http.ResponseWriter, r *http.Request) error {
	limit, c, err := page(r)
	if err != nil {
		return err
	}
	items, err := a.Store.Drain.ListDrains(r.Context(), c.ID, limit)
	if err != nil {
		return err
	}
	for i := range items {
		items[i] = *scopedDrain(r, &items[i])
	}
	return writeJSON(w, http.StatusOK, newList(items, limit, func(d checkpointd.Drain) cursor { return cursor{ID: d.ID} }))
}

// scopedDrain is d as a token may see it: a decision's blocking list keeps
// only the sessions in the token's scope (the counts stay whole, as the
// drain's counts do). The stored drain is not changed.
func scopedDrain(r *http.Request, d *checkpointd.Drain) *checkpointd.Drain {
	p := principal(r)
	if d == nil || d.Decision == nil || p.ScopeFilter() == nil {
		return d
	}
	out, dec := *d, *d.Decision
	dec.Blocking = make([]checkpointd.DrainBlocker, 0, len(d.Decision.Blocking))
	for _, b := range d.Decision.Blocking {
		if p.InScope(b.Repo) {
			dec.Blocking = append(dec.Blocking, b)
		}
	}
	out.Decision = &dec
	return &out
}
