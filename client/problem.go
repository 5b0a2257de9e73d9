package client

import (
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/checkpointd/checkpointd"
)

// Error is a problem answer of the daemon (RFC 9457
// application/problem+json): match it with errors.As and branch on Code, the stable
// machine-readable reason (not_found, run_superseded, lease_held, …).
// An answer of an error status that is not a problem document (a proxy's
// 502 page) is an Error too, with an empty Code and the body in Body.
//
// Error also unwraps to the domain sentinel of its code, so
// errors.Is(err, checkpointd.ErrRunSuperseded) holds for a 409
// run_superseded.
type Error struct {
	// Status is the HTTP status of the answer.
	Status int    `json:"status"`
	Type   string `json:"type"`
	Title  string `json:"title"`
	Code   string `json:"code"`
	Detail string `json:"detail"`
	// Problems lists what is wrong with a request or a checkpoint document
	// (422), by JSON pointer into the body (or the query parameter's name).
	Problems []checkpointd.Problem `json:"problems"`
	// Extra holds the code-specific members of the problem (a lease's
	// holder, the drain's blocking list, a tombstone's fields); the typed
	// accessors Holder, Blocked, Tombstone and RunningDrain read them.
	Extra map[string]json.RawMessage `json:"-"`
	// Body is the answer as sent, for a caller that prints it (--json).
	Body []byte `json:"-"`
	// Method and Path name the request that got the answer; RequestID is
	// the daemon's X-Request-Id, which its log carries too.
	Method, Path, RequestID string `json:"-"`
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "checkpointd: %s %s: %d", e.Method, e.Path, e.Status)
	if e.Code != "" {
		b.WriteString(" " + e.Code)
	}
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	if e.Detail == "" { // the daemon's detail already lists the problems
		for _, p := range e.Problems {
			fmt.Fprintf(&b, "; %s: %s", p.Path, p.Message)
		}
	}
	return b.String()
}

// sentinels maps problem codes to the domain errors they stand for.
var sentinels = map[string]error{
	"invalid_json":          checkpointd.ErrInvalidJSON,
	"invalid_checkpoint":    checkpointd.ErrInvalidCheckpoint,
	"invalid_request":       checkpointd.ErrInvalidRequest,
	"unauthorized":          checkpointd.ErrUnauthorized,
	"forbidden":             checkpointd.ErrForbidden,
	"not_found":             checkpointd.ErrNotFound,
	"gone":                  checkpointd.ErrGone,
	"run_superseded":        checkpointd.ErrRunSuperseded,
	"run_active":            checkpointd.ErrRunActive,
	"session_ended":         checkpointd.ErrSessionEnded,
	"no_current_run":        checkpointd.ErrNoCurrentRun,
	"idempotency_conflict":  checkpointd.ErrIdempotencyConflict,
	"idempotency_in_flight": checkpointd.ErrIdempotencyInFlight,
	"lease_held":            checkpointd.ErrLeaseHeld,
	"lease_lost":            checkpointd.ErrLeaseLost,
	"drain_blocked":         checkpointd.ErrDrainBlocked,
	"draining":              checkpointd.ErrDraining,
	"checkpoint_corrupt":    checkpointd.ErrCheckpointCorrupt,
	"store_unavailable":     checkpointd.ErrStoreUnavailable,
}

// Unwrap returns the domain sentinel of the problem's code, or nil.
func (e *Error) Unwrap() error { return sentinels[e.Code] }

// newError reads a non-2xx answer.
func newError(r *request, a *answer) *Error {
	e := &Error{Status: a.status, Body: a.body, Method: r.method, Path: r.path, RequestID: a.header.Get("X-Request-Id")}
	mt, _, _ := mime.ParseMediaType(a.header.Get("Content-Type"))
	if mt == "application/problem+json" || mt == "application/json" {
		var members map[string]json.RawMessage
		if json.Unmarshal(a.body, &members) == nil && json.Unmarshal(a.body, e) == nil {
			for _, k := range []string{"status", "type", "title", "code", "detail", "problems"} {
				delete(members, k)
			}
			if len(members) > 0 {
				e.Extra = members
			}
		}
		e.Status = a.status // the status line wins over a member that disagrees
	}
	if e.Title == "" {
		e.Title = http.StatusText(a.status)
	}
	if a.status >= 300 && a.status < 400 && e.Detail == "" {
		e.Detail = "the answer is a redirect, which the client does not follow"
		if loc := a.header.Get("Location"); loc != "" {
			e.Detail += " (to " + redactURL(loc) + ")"
		}
	}
	return e
}

// Member decodes the extra member name of the problem into v; it reports
// false when the problem has no such member or it does not decode.
func (e *Error) Member(name string, v any) bool {
	raw, ok := e.Extra[name]
	return ok && json.Unmarshal(raw, v) == nil
}

// LeaseHolder is the holder a 409 lease_held names: who has the resource,
// under which fencing token, until when.
type LeaseHolder struct {
	LeaseID      string    `json:"lease_id"`
	SessionID    string    `json:"session_id"`
	RunID        string    `json:"run_id"`
	FencingToken int64     `json:"fencing_token"`
	ExpiresAt    time.Time `json:"expires_at"`
}

// Holder is the lease holder of a lease_held problem, or nil.
func (e *Error) Holder() *LeaseHolder {
	var h LeaseHolder
	if e.Code != "lease_held" || !e.Member("holder", &h) {
		return nil
	}
	return &h
}

// DrainBlocked is what a 409 drain_blocked carries: the decision's counts,
// the head of the blocking list and the replicas that did not confirm
// (docs/drain.md).
type DrainBlocked struct {
	DrainID     string                           `json:"drain_id"`
	Counts      checkpointd.DrainCounts          `json:"counts"`
	Blocking    []checkpointd.DrainBlocker       `json:"blocking"`
	Unconfirmed []checkpointd.UnconfirmedReplica `json:"unconfirmed_replicas"`
	DecidedAt   time.Time                        `json:"decided_at"`
}

// Blocked is the decision of a drain_blocked problem, or nil.
func (e *Error) Blocked() *DrainBlocked {
	if e.Code != "drain_blocked" {
		return nil
	}
	var d DrainBlocked
	if json.Unmarshal(e.Body, &d) != nil {
		return nil
	}
	return &d
}

// RunningDrain is the drain already running that a 409 drain_running names
// (POST /v1/drain while one runs), or nil.
func (e *Error) RunningDrain() *checkpointd.Drain {
	var d checkpointd.Drain
	if e.Code != "drain_running" || !e.Member("drain", &d) {
		return nil
	}
	return &d
}

// Tombstone is what a 410 gone says of the removed session: its id, kind
// (cleared or pruned) and time for any caller in scope, and for an operator
// the whole audit record (who, why, what was removed). Nil otherwise.
func (e *Error) Tombstone() *checkpointd.Tombstone {
	if e.Code != "gone" {
		return nil
	}
	var t checkpointd.Tombstone
	if json.Unmarshal(e.Body, &t) != nil || t.SessionID == "" {
		return nil
	}
	return &t
}

// TransportError is a request that got no answer to read: the daemon could
// not be reached, the connection broke, or the answer was unreadable. The
// request may or may not have been handled; Attempts says how often it was
// sent.
type TransportError struct {
	Method, Path string
	Attempts     int
	Err          error
}

func (e *TransportError) Error() string {
	s := fmt.Sprintf("checkpointd: %s %s: %v", e.Method, e.Path, e.Err)
	if e.Attempts > 1 {
		s += fmt.Sprintf(" (after %d tries)", e.Attempts)
	}
	return s
}

func (e *TransportError) Unwrap() error { return e.Err }

// redactURL is a redirect's target as an error may show it: without
// credentials, query or fragment (a redirect may carry a token in any).
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "an unreadable location"
	}
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
	return u.String()
}
