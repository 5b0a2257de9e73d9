package api

import (
	"net/http"

	"github.com/checkpointd/checkpointd"
)

// fleetResponse is GET /v1/fleet: the numbers at the top of a fleet view.
type fleetResponse struct {
	// Active counts active sessions by validity (every validity present).
	Active map[checkpointd.Validity]int64 `json:"active"`
	// ByLiveness counts active sessions as live, unresponsive or parked.
	ByLiveness map[string]int64 `json:"by_liveness"`
	LeasesHeld int64            `json:"leases_held"`
	Total      int64            `json:"total_active"`
}

// fleet answers the fleet's counts (reader), read from the database in one
// statement, as the gauges are. Like the drain's counts they cover every
// repo: a scoped token sees the numbers, and only its repos' sessions in
// the lists.
func (a *api) fleet(w http.ResponseWriter, r *http.Request) error {
	c, err := a.Store.Sessions.FleetCounts(r.Context())
	if err != nil {
		return err
	}
	resp := fleetResponse{Active: c.Active, ByLiveness: c.ByLiveness, LeasesHeld: c.LeasesHeld}
	for _, n := range c.Active {
		resp.Total += n
	}
	return writeJSON(w, http.StatusOK, resp)
}
