package client

import (
	"context"
	"net/http"

	"github.com/checkpointd/checkpointd"
)

// FleetCounts is GET /v1/fleet: the active sessions by validity and by
// liveness (live, unresponsive, parked), and the leases held.
type FleetCounts struct {
	Active      map[checkpointd.Validity]int64 `json:"active"`
	ByLiveness  map[string]int64               `json:"by_liveness"`
	LeasesHeld  int64                          `json:"leases_held"`
	TotalActive int64                          `json:"total_active"`
}

// Fleet reads the fleet's counts.
func (c *Client) Fleet(ctx context.Context) (*FleetCounts, error) {
	var out FleetCounts
	if _, err := c.call(ctx, &request{method: http.MethodGet, path: "/v1/fleet"}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
