package checkpointd

import (
	"github.com/checkpointd/checkpointd/redact"

	"strings"
	"time"
	"unicode/utf8"
)

// ErrorSource names the part of the daemon a durable error comes from.
type ErrorSource string

// Error sources (docs/errors.md).
const (
	// ErrorSourceCheckpointWrite is a checkpoint write the daemon refused
	// for what was sent (400, 413, 415, 422) or failed itself (5xx).
	ErrorSourceCheckpointWrite ErrorSource = "checkpoint_write"
	// ErrorSourceReconcile is a repository the forge could not answer
	// about in a reconcile pass, or a pass that stopped early.
	ErrorSourceReconcile ErrorSource = "reconcile"
	// ErrorSourceWebhook is a webhook delivery that was refused: bad or
	// missing signature, malformed, wrong shape, too large.
	ErrorSourceWebhook ErrorSource = "webhook"
	// ErrorSourceForgeStatus is a commit status the forge refused or could
	// not take after its retries (--forge-status).
	ErrorSourceForgeStatus ErrorSource = "forge_status"
)

// ErrorSources are every source, in a fixed order.
var ErrorSources = []ErrorSource{ErrorSourceCheckpointWrite, ErrorSourceReconcile, ErrorSourceWebhook, ErrorSourceForgeStatus}

// Valid reports whether s is a known source.
func (s ErrorSource) Valid() bool {
	for _, k := range ErrorSources {
		if s == k {
			return true
		}
	}
	return false
}

// Bounds of a durable error's fields: they are written on failure paths a
// client can trigger at will, so nothing unbounded reaches the table.
const (
	MaxErrorDetail = 1024
	MaxErrorCode   = 64
	maxErrorHeader = 128 // delivery id, event name
)

// ErrorRecord is one durable error: a failure that matters after the
// request or pass that met it is gone: errors are durable.
// It never carries a request body, a signature or a token; Detail is
// redacted and bounded.
type ErrorRecord struct {
	ID     int64       `json:"id"`
	At     time.Time   `json:"at"`
	Source ErrorSource `json:"source"`
	// Code is a stable machine-readable reason (a problem code, a webhook
	// rejection code, a forge failure class).
	Code      string `json:"code"`
	SessionID string `json:"session_id,omitempty"`
	Repo      string `json:"repo,omitempty"`
	// Delivery and Event are the webhook's delivery id and event header,
	// as sent (unauthenticated when the signature failed).
	Delivery string `json:"delivery,omitempty"`
	Event    string `json:"event,omitempty"`
	Detail   string `json:"detail,omitempty"`
}

// Sanitized returns e fit to store: Detail redacted (redact.String) and cut
// to MaxErrorDetail bytes, Code cut to MaxErrorCode, header values kept
// only when they are short visible ASCII, ids only when ValidID.
func (e ErrorRecord) Sanitized() ErrorRecord {
	d := strings.ToValidUTF8(e.Detail, "\uFFFD")
	if red, _, err := redact.String(d); err == nil {
		d = red
	}
	e.Detail = truncateUTF8(d, MaxErrorDetail)
	e.Code = truncateUTF8(strings.ToValidUTF8(e.Code, ""), MaxErrorCode)
	if e.Code == "" {
		e.Code = "unknown"
	}
	if !visibleASCII(e.Delivery, maxErrorHeader) {
		e.Delivery = ""
	}
	if !visibleASCII(e.Event, maxErrorHeader) {
		e.Event = ""
	}
	if e.SessionID != "" && !ValidID(e.SessionID) {
		e.SessionID = ""
	}
	if len(e.Repo) > MaxBranchLength || !utf8.ValidString(e.Repo) {
		e.Repo = ""
	}
	return e
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func visibleASCII(s string, max int) bool {
	if len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}
