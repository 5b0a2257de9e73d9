package client

import (
	"context"
	"encoding/json"
)

// Reconcile calls the reconcile routes (/v1/reconcile…).
//
// A report is returned as the JSON the daemon sent: decode it into
// reconcile.Report (package github.com/checkpointd/checkpointd/reconcile).
// The client does not import that package, so that an agent linking the
// client does not link the store, its database drivers and the forge SDK.
type Reconcile struct{ c *Client }

type reportAnswer struct {
	Report json.RawMessage `json:"report"`
}

// Run reconciles every active session against the forge now (operator)
// and returns the pass's report. Sent once: a pass is not free, and a lost
// answer is read back with Last.
func (rc *Reconcile) Run(ctx context.Context) (json.RawMessage, error) {
	var out reportAnswer
	if err := rc.c.post(ctx, "/v1/reconcile", nil, &out); err != nil {
		return nil, err
	}
	return report(out.Report), nil
}

// Last reads the report of the last pass, limited to the token's scope;
// nil when no pass ran yet.
func (rc *Reconcile) Last(ctx context.Context) (json.RawMessage, error) {
	var out reportAnswer
	if err := rc.c.get(ctx, "/v1/reconcile/last", nil, &out); err != nil {
		return nil, err
	}
	return report(out.Report), nil
}

// report is nil for a JSON null: no report.
func report(raw json.RawMessage) json.RawMessage {
	if string(raw) == "null" || len(raw) == 0 {
		return nil
	}
	return raw
}
