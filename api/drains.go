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
	items, err := a.Store.ListDrains(r.Context(), c.ID, limit)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, newList(items, limit, func(d checkpointd.Drain) cursor { return cursor{ID: d.ID} }))
}
