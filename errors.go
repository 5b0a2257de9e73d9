package checkpointd

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors of the domain. Every layer wraps them with %w; the API maps
// each to one HTTP status and one stable problem code (api/errors.go).
var (
	ErrNotFound          = errors.New("not found")
	ErrInvalidRequest    = errors.New("invalid request")
	ErrInvalidCheckpoint = errors.New("invalid checkpoint")
	ErrRunSuperseded     = errors.New("run superseded")
	ErrRunActive         = errors.New("session has an active run")
	// ErrRunChanged refuses a conditional takeover (if_run) whose run is
	// no longer the current one: another claimant came first.
	ErrRunChanged          = errors.New("run changed")
	ErrSessionEnded        = errors.New("session ended")
	ErrNoCurrentRun        = errors.New("session has no current run")
	ErrGone                = errors.New("gone")
	ErrIdempotencyConflict = errors.New("idempotency key reused with a different request")
	ErrIdempotencyInFlight = errors.New("idempotency key is being processed")
	ErrLeaseHeld           = errors.New("lease held")
	ErrLeaseLost           = errors.New("lease lost")
	ErrDraining            = errors.New("draining")
	ErrDrainBlocked        = errors.New("drain blocked")
	ErrUnauthorized        = errors.New("unauthorized")
	ErrForbidden           = errors.New("forbidden")
	ErrStoreUnavailable    = errors.New("store unavailable")
	// ErrCheckpointCorrupt reports a stored checkpoint that cannot be read
	// back whole: its document does not parse, or its sealed fields do not
	// open under the server's keys. It is not the store being unreachable:
	// retrying does not help.
	ErrCheckpointCorrupt = errors.New("checkpoint corrupt")
	// ErrContended reports a change the database kept refusing because
	// concurrent changes of the same rows conflicted with it (deadlocks,
	// serialization failures, a busy SQLite), after the store retried it:
	// nothing was changed, and a retry may well pass.
	ErrContended = errors.New("contended")
)

// Sentinels are every sentinel error above: what a layer passes on as it
// is, where anything else from a database or a driver is the store being
// unavailable (a test keeps the list whole).
var Sentinels = []error{
	ErrNotFound, ErrInvalidRequest, ErrInvalidCheckpoint, ErrRunSuperseded, ErrRunActive, ErrRunChanged, ErrSessionEnded,
	ErrNoCurrentRun, ErrGone, ErrIdempotencyConflict, ErrIdempotencyInFlight, ErrLeaseHeld, ErrLeaseLost,
	ErrDraining, ErrDrainBlocked, ErrUnauthorized, ErrForbidden, ErrStoreUnavailable, ErrCheckpointCorrupt, ErrKey,
	ErrInvalidJSON, ErrInvalidWorkflow, ErrContended,
}

// OutOfScope is the refusal of a caller whose token's repo scope does not
// cover a session (or the repository it asked about): it names nothing, so
// an out-of-scope caller learns no more than one with a wrong id.
func OutOfScope() error {
	return fmt.Errorf("%w: the token's scope does not cover it", ErrForbidden)
}

// Problem is one reason a request or document was rejected, located by a
// JSON pointer-like path ("/workspace/head").
type Problem struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

// ValidationError carries the problems found in a request or a checkpoint
// document. It matches its Kind (ErrInvalidRequest or ErrInvalidCheckpoint)
// with errors.Is.
type ValidationError struct {
	Kind     error
	Problems []Problem
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	b.WriteString(e.Kind.Error())
	for i, p := range e.Problems {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		if p.Path != "" {
			b.WriteString(p.Path + ": ")
		}
		b.WriteString(p.Message)
	}
	return b.String()
}

func (e *ValidationError) Unwrap() error { return e.Kind }

// Invalid returns a ValidationError of kind ErrInvalidRequest with one problem.
func Invalid(path, message string) error {
	return &ValidationError{Kind: ErrInvalidRequest, Problems: []Problem{{Path: path, Message: message}}}
}

// ErrInvalidJSON reports a request body that is not well-formed JSON.
var ErrInvalidJSON = errors.New("malformed JSON")
