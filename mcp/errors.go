package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/client"
)

// toolError is what a failed call tells the model: the daemon's problem
// (its stable code, the detail, the problems by JSON pointer, and the
// code-specific members such as a lease's holder) as a tool result with
// isError, never a protocol error, so the model can read it and recover.
type toolError struct {
	Status   int                        `json:"status,omitempty"`
	Code     string                     `json:"code"`
	Detail   string                     `json:"detail,omitempty"`
	Problems any                        `json:"problems,omitempty"`
	Extra    map[string]json.RawMessage `json:"extra,omitempty"`
	// Next says what to do about it, for the codes an agent meets.
	Next string `json:"next,omitempty"`
}

// nextSteps are the instructions a model gets with a problem code.
var nextSteps = map[string]string{
	"run_superseded":        "Another run took this session over (or an operator parked it): stop working on it now; do not write, push or comment.",
	"run_active":            "The session has a live run: call session_resume with takeover true only if that run is really gone.",
	"run_changed":           "Another agent claimed this session first (its current run is not the one you named in if_run): leave it; find other work with session_find.",
	"lease_held":            "Another session holds this resource (see extra.holder): do not touch it; wait, or work on something else.",
	"lease_lost":            "The lease expired or moved: acquire it again before touching the resource, then write a checkpoint.",
	"invalid_checkpoint":    "Fix the fields named in problems (JSON pointers into the checkpoint) and write again with the same idempotency_key.",
	"invalid_request":       "Fix the arguments named in problems and call again.",
	"idempotency_conflict":  "checkpoint_write: this idempotency_key was used for a different document, use a new key for a new checkpoint. session_start: the key names another task, the session in extra.session_id (another repo, target or role): resume that session, or use another key for this task.",
	"idempotency_in_flight": "The same write is still being handled: call again in a moment with the same idempotency_key.",
	"draining":              "The daemon is draining before a deploy: no new sessions or runs. Write a complete checkpoint of the current state and stop.",
	"session_ended":         "The session has ended: start a new session for new work.",
	"gone":                  "The session was force-cleared or pruned: start a new session.",
	"not_found":             "Check the id: no such session or lease in your scope.",
	"forbidden":             "The token's role or repository scope does not allow this.",
	"unauthorized":          "The token is missing, unknown or revoked.",
	"store_unavailable":     "The daemon cannot reach its database: retry with the same arguments (and idempotency_key) shortly.",
}

// takeoverError is a takeover that succeeded whose resume read failed:
// the error result carries the new run, which is the caller's now.
type takeoverError struct {
	taken *client.RunStarted
	err   error
}

func (e *takeoverError) Error() string { return e.err.Error() }
func (e *takeoverError) Unwrap() error { return e.err }

func errorResult(err error) *sdk.CallToolResult {
	var tk *takeoverError
	if errors.As(err, &tk) {
		res := errorResult(tk.err)
		var te map[string]any
		_ = json.Unmarshal([]byte(res.Content[0].(*sdk.TextContent).Text), &te)
		te["run"], te["leases"] = tk.taken.Run, tk.taken.Leases
		te["next"] = "The takeover succeeded: run is your new run (keep its id and fencing_token) and leases the leases it holds with their new tokens; only reading the verdict failed. Call session_resume with run_id and without takeover."
		b, _ := json.Marshal(te)
		res.Content = []sdk.Content{&sdk.TextContent{Text: string(b)}}
		return res
	}
	te := toolError{Code: "error", Detail: err.Error()}
	var p *client.Error
	var t *client.TransportError
	switch {
	case errors.As(err, &p):
		te = toolError{Status: p.Status, Code: p.Code, Detail: p.Detail, Extra: p.Extra, Next: nextSteps[p.Code]}
		if len(p.Problems) > 0 {
			te.Problems = p.Problems
		}
		if te.Code == "" {
			te.Code = "http_error"
		}
	case errors.As(err, &t), errors.Is(err, context.DeadlineExceeded):
		// A deadline is the bridge's call timeout (or the caller's): the
		// daemon did not answer in time, which tells nothing of the effect.
		te.Code, te.Next = "unreachable", "The daemon did not answer; the call may or may not have taken effect: read the state back (session_resume) before repeating anything that is not idempotent."
	}
	b, _ := json.Marshal(te)
	return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: string(b)}}}
}

// invalidArguments is a tool error for arguments that do not decode: the
// field, the type it must have and a problems entry, in the words of the
// input schema, not of Go.
func invalidArguments(err error) *sdk.CallToolResult {
	p := checkpointd.Problem{Message: "the arguments must be a JSON object matching the tool's input schema"}
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &te) && te.Field != "":
		p = checkpointd.Problem{Path: "/" + strings.ReplaceAll(te.Field, ".", "/"),
			Message: fmt.Sprintf("must be %s, not %s", jsonType(te.Type), article(te.Value))}
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name, _ := strconv.Unquote(strings.TrimPrefix(err.Error(), "json: unknown field "))
		p = checkpointd.Problem{Path: "/" + name, Message: "is not an argument of this tool"}
	}
	detail := "the arguments do not match the tool's input schema"
	if p.Path != "" {
		detail += ": " + strings.TrimPrefix(p.Path, "/") + " " + p.Message
	}
	b, _ := json.Marshal(toolError{Code: "invalid_request", Detail: detail, Problems: []checkpointd.Problem{p},
		Next: nextSteps["invalid_request"]})
	return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: string(b)}}}
}

// jsonType names the JSON type a Go type decodes from.
func jsonType(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean (true or false)"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "an object"
}

// article words a JSON value kind as encoding/json reports it ("string",
// "number", "number 1.5", "object", …).
func article(kind string) string {
	switch {
	case strings.HasPrefix(kind, "number"):
		return "a " + kind
	case kind == "array", kind == "object":
		return "an " + kind
	case kind == "bool":
		return "a boolean" // JSON's word, not Go's
	}
	return "a " + kind
}
