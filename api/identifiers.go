package api

import (
	"strings"

	"github.com/checkpointd/checkpointd/redact"
)

// looksLikeSecret reports whether s would not survive redaction as it is:
// redact.String changes it, cannot read it, or s already holds a
// redaction marker (which a stored name would make indistinguishable from
// one the daemon wrote). Identifying values (docs/redaction.md, "What else
// is scanned") are refused when it holds: a rewritten name matches nothing.
func looksLikeSecret(s string) bool {
	red, _, err := redact.String(s)
	return err != nil || red != s || strings.Contains(s, redactionMarker)
}

// redactionMarker opens every "[REDACTED:<kind>]" marker redact writes.
const redactionMarker = "[REDACTED:"
