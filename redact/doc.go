// Package redact replaces secrets in agent-supplied text with
// "[REDACTED:<kind>]" markers before anything is stored, logged or echoed.
//
// The API is small: String scans one string, Tree walks a decoded JSON tree
// (a value under a key named like a secret is replaced whole), and
// ErrUnredactable reports input that cannot be scanned (the caller must
// refuse it, never store it raw). The rule table is rules.go; the kinds are
// a stable contract listed in docs/redaction.md. Commit SHAs are never
// redacted: a bare 40-hex string is a secret only when its context says so.
package redact
