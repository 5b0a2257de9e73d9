// Package checkpointd is the domain of the checkpointd daemon: sessions,
// runs, schema v1 checkpoint documents, their validation and completeness,
// canonical JSON, sentinel errors and the injectable clock.
//
// It imports no HTTP and no SQL. The store, api, webhook, reconcile and
// lease packages implement it; cmd/checkpointd wires them together.
package checkpointd
