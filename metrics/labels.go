package metrics

import (
	"slices"

	"github.com/checkpointd/checkpointd"
)

// The fixed label values. A value outside its set is counted as "other",
// so no label can carry a repo, an id, a path or a secret whatever a
// caller passes.

// problemCodes are "ok" and the stable problem codes of the API (a test in
// package api holds them together with its error table).
var problemCodes = []string{"ok", "internal",
	"invalid_json", "invalid_checkpoint", "invalid_request", "unauthorized", "forbidden", "not_found", "gone",
	"run_superseded", "run_active", "run_changed", "session_ended", "no_current_run", "idempotency_conflict", "idempotency_in_flight",
	"lease_held", "lease_lost", "drain_blocked", "contended", "drain_running", "draining", "store_unavailable", "checkpoint_corrupt",
	"payload_too_large", "unsupported_media_type", "method_not_allowed", "invalid_idempotency_key", "invalid_query", "too_many_watchers"}

// ProblemCodes returns the problem codes the metrics know.
func ProblemCodes() []string { return slices.Clone(problemCodes) }

// webhookEvents are the forge event names counted by name.
var webhookEvents = []string{"push", "create", "delete", "pull_request", "pull_request_sync",
	"pull_request_assign", "pull_request_label", "pull_request_milestone", "pull_request_comment",
	"pull_request_review_request", "pull_request_review_approved", "pull_request_review_rejected",
	"pull_request_review_comment", "pull_request_approved", "pull_request_rejected",
	"issues", "issue_assign", "issue_label", "issue_milestone", "issue_comment",
	"release", "repository", "fork", "wiki", "status", "package", "workflow_run", "workflow_job"}

// webhookOutcomes: what the handler did with a verified delivery, or the
// code it refused one with (webhook.rejections).
var webhookOutcomes = []string{"applied", "duplicate", "ignored", "store_unavailable",
	"webhook_secret_not_configured", "missing_signature", "bad_signature", "payload_too_large",
	"unsupported_media_type", "method_not_allowed", "malformed_delivery", "webhook_busy", "request_timeout"}

var validityCauses = []string{"webhook", "reconcile", "checkpoint", "lease", "restart"}

var validities = []string{string(checkpointd.ValidityValid), string(checkpointd.ValidityStale),
	string(checkpointd.ValidityLeaseLost), string(checkpointd.ValidityInvalidated), string(checkpointd.ValidityUnverified)}

var leaseEvents = []string{"acquired", "renewed", "released", "expired", "moved"}

var forgeOutcomes = []string{"ok", "not_found", "rate_limited", "server_error", "client_error", "timeout", "unreachable", "error"}

var errorSources = func() []string {
	out := make([]string, len(checkpointd.ErrorSources))
	for i, s := range checkpointd.ErrorSources {
		out[i] = string(s)
	}
	return out
}()

var (
	storeOps       = []string{"read", "write", "ping"}
	retryReasons   = []string{"conflict", "connection"}
	drainDecisions = []string{"completed", "blocked", "failed"}
)

var httpMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

// oneOf returns v when it is in set, else "other".
func oneOf(v string, set []string) string {
	if slices.Contains(set, v) {
		return v
	}
	return "other"
}
