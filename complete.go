package checkpointd

import (
	"slices"
	"strings"
)

// Missing returns the completeness rules (docs/checkpoint.md)
// that doc does not meet, by name and in this fixed order: "stage",
// "identity.runtime", "next_action", "recovery.instructions",
// "workspace.head", "pending_mutation.idempotency_key", then "lease:<id>" for
// each lease the document names, in document order, that is not in held or
// whose fencing token differs from held[id]. held maps the ids of the leases
// the writing run holds at write time to their fencing tokens.
//
// Text counts as missing when it is empty or only white space: a blank
// instruction is no help to a resuming run. Missing returns nil when doc is
// complete; it returns no error because doc has already passed the schema.
// A nil doc is treated as an empty document.
func Missing(doc *Document, held map[string]int64) []string {
	if doc == nil {
		doc = &Document{}
	}
	var missing []string
	if blankText(doc.Stage) {
		missing = append(missing, "stage")
	}
	if doc.Identity == nil || blankText(doc.Identity.Runtime) {
		missing = append(missing, "identity.runtime")
	}
	if doc.NextAction == nil || blankText(doc.NextAction.Action) {
		missing = append(missing, "next_action")
	}
	if doc.Recovery == nil || blankText(doc.Recovery.Instructions) {
		missing = append(missing, "recovery.instructions")
	}
	if ws := doc.Workspace; ws != nil && ws.Branch != "" && blankText(ws.Head) {
		missing = append(missing, "workspace.head")
	}
	if pm := doc.PendingMutation; pm != nil && blankText(pm.IdempotencyKey) {
		missing = append(missing, "pending_mutation.idempotency_key")
	}
	for _, l := range doc.Leases {
		if tok, ok := held[l.LeaseID]; ok && tok == l.FencingToken {
			continue
		}
		// One rule per lease, even when the document names it twice.
		if rule := "lease:" + l.LeaseID; !slices.Contains(missing, rule) {
			missing = append(missing, rule)
		}
	}
	return missing
}

// Complete reports whether a checkpoint with these unmet rules (the result
// of Missing) is complete.
func Complete(missing []string) bool { return len(missing) == 0 }

func blankText(s string) bool { return strings.TrimSpace(s) == "" }

// HoldsLeases reports whether every lease doc names is in held at the
// fencing token doc names for it.
func HoldsLeases(doc *Document, held map[string]int64) bool {
	if doc == nil {
		return true
	}
	for _, l := range doc.Leases {
		if tok, ok := held[l.LeaseID]; !ok || tok != l.FencingToken {
			return false
		}
	}
	return true
}
