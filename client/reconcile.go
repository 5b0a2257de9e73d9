package client

import (
	"context"

	"github.com/checkpointd/checkpointd/reconcile"
)

// Reconcile calls the reconcile routes (/v1/reconcile…, DESIGN §8).
type Reconcile struct{ c *Client }

type reportAnswer struct {
	Report *reconcile.Report `json:"report"`
}

// Run reconciles every active session against the forge now (operator)
// and returns the pass's report. Sent once: a pass is not free, and a lost
// answer is read back with Last.
func (rc *Reconcile) Run(ctx context.Context) (*reconcile.Report, error) {
	var out reportAnswer
	if err := rc.c.post(ctx, "/v1/reconcile", nil, &out); err != nil {
		return nil, err
	}
	return out.Report, nil
}

// Last reads the report of the last pass, limited to the token's scope;
// nil when no pass ran yet.
func (rc *Reconcile) Last(ctx context.Context) (*reconcile.Report, error) {
	var out reportAnswer
	if err := rc.c.get(ctx, "/v1/reconcile/last", nil, &out); err != nil {
		return nil, err
	}
	return out.Report, nil
}
