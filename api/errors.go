package api

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/redact"
)

// handlerFunc is an HTTP handler that returns its error; one adapter turns
// errors into problem+json responses, so handlers never write errors
// themselves.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// errorStatus maps domain errors to HTTP statuses and stable problem codes.
// The first match wins; order matters only for errors that wrap two sentinels.
var errorStatus = []struct {
	err    error
	status int
	code   string
}{
	{checkpointd.ErrInvalidJSON, http.StatusBadRequest, "invalid_json"},
	{checkpointd.ErrInvalidCheckpoint, http.StatusUnprocessableEntity, "invalid_checkpoint"},
	{checkpointd.ErrInvalidRequest, http.StatusUnprocessableEntity, "invalid_request"},
	{checkpointd.ErrUnauthorized, http.StatusUnauthorized, "unauthorized"},
	{checkpointd.ErrForbidden, http.StatusForbidden, "forbidden"},
	{checkpointd.ErrNotFound, http.StatusNotFound, "not_found"},
	{checkpointd.ErrGone, http.StatusGone, "gone"},
	{checkpointd.ErrRunSuperseded, http.StatusConflict, "run_superseded"},
	{checkpointd.ErrRunActive, http.StatusConflict, "run_active"},
	{checkpointd.ErrRunChanged, http.StatusConflict, "run_changed"},
	{checkpointd.ErrSessionEnded, http.StatusConflict, "session_ended"},
	{checkpointd.ErrNoCurrentRun, http.StatusConflict, "no_current_run"},
	{checkpointd.ErrIdempotencyConflict, http.StatusUnprocessableEntity, "idempotency_conflict"},
	{checkpointd.ErrIdempotencyInFlight, http.StatusConflict, "idempotency_in_flight"},
	{checkpointd.ErrLeaseHeld, http.StatusConflict, "lease_held"},
	{checkpointd.ErrLeaseLost, http.StatusConflict, "lease_lost"},
	{checkpointd.ErrDrainBlocked, http.StatusConflict, "drain_blocked"},
	{checkpointd.ErrContended, http.StatusConflict, "contended"},
	{errDrainRunning, http.StatusConflict, "drain_running"},
	{checkpointd.ErrDraining, http.StatusServiceUnavailable, "draining"},
	{checkpointd.ErrCheckpointCorrupt, http.StatusInternalServerError, "checkpoint_corrupt"},
	{checkpointd.ErrStoreUnavailable, http.StatusServiceUnavailable, "store_unavailable"},
	{errPayloadTooLarge, http.StatusRequestEntityTooLarge, "payload_too_large"},
	{errUnsupportedMediaType, http.StatusUnsupportedMediaType, "unsupported_media_type"},
	{errMethodNotAllowed, http.StatusMethodNotAllowed, "method_not_allowed"},
	{errBadIdempotencyKey, http.StatusBadRequest, "invalid_idempotency_key"},
	{errConflictingQuery, http.StatusBadRequest, "invalid_query"},
	{errTooManyWatchers, http.StatusTooManyRequests, "too_many_watchers"},
}

var (
	errPayloadTooLarge      = errors.New("payload too large")
	errUnsupportedMediaType = errors.New("content type must be application/json")
	errMethodNotAllowed     = errors.New("method not allowed")
	// errConflictingQuery is a query whose parameters contradict each
	// other (events' `after` and `cursor` together); no reading
	// of it is the caller's intent, so it is refused rather than guessed.
	errConflictingQuery = errors.New("conflicting query parameters")
)

// Problem is an RFC 9457 problem document with a stable machine-readable
// code and, for validation failures, the list of problems.
type Problem struct {
	Type     string                `json:"type"`
	Title    string                `json:"title"`
	Status   int                   `json:"status"`
	Code     string                `json:"code"`
	Detail   string                `json:"detail,omitempty"`
	Problems []checkpointd.Problem `json:"problems,omitempty"`
	// Extra carries code-specific members (e.g. the holder of a lease).
	Extra map[string]any `json:"-"`
}

// MarshalJSON flattens Extra into the problem object, as RFC 9457 allows.
func (p Problem) MarshalJSON() ([]byte, error) {
	type plain Problem
	b, err := json.Marshal(plain(p))
	if err != nil || len(p.Extra) == 0 {
		return b, err
	}
	m := map[string]any{}
	_ = json.Unmarshal(b, &m)
	for k, v := range p.Extra {
		if _, taken := m[k]; !taken {
			m[k] = v
		}
	}
	return json.Marshal(m)
}

// ProblemError lets a handler attach extra members to the problem of err,
// and a detail of its own (else the code's).
type ProblemError struct {
	Err    error
	Detail string
	Extra  map[string]any
}

func (e *ProblemError) Error() string { return e.Err.Error() }
func (e *ProblemError) Unwrap() error { return e.Err }

// problemFor builds the response for err. 5xx details stay generic: the
// cause goes to the log, not to the client. A detail, a problem's message
// and its path may quote what the client sent (a stage that is not
// configured, the name of an unknown field): they are redacted like
// everything else an agent sends before it is echoed.
func problemFor(err error) Problem {
	p := Problem{Status: http.StatusInternalServerError, Code: "internal", Detail: "internal error; see the daemon log"}
	for _, e := range errorStatus {
		if errors.Is(err, e.err) {
			p.Status, p.Code = e.status, e.code
			p.Detail = err.Error()
			break
		}
	}
	switch p.Code {
	case "store_unavailable":
		p.Detail = "the store cannot be reached; nothing was changed"
	case "checkpoint_corrupt":
		p.Detail = "the stored checkpoint cannot be read back whole; see the daemon log"
	}
	var ve *checkpointd.ValidationError
	if errors.As(err, &ve) {
		p.Problems = make([]checkpointd.Problem, len(ve.Problems))
		for i, vp := range ve.Problems {
			p.Problems[i] = checkpointd.Problem{Path: safeText(vp.Path), Message: safeText(vp.Message)}
		}
	}
	p.Detail = safeText(p.Detail)
	var pe *ProblemError
	if errors.As(err, &pe) {
		p.Extra = pe.Extra
		if pe.Detail != "" {
			p.Detail = pe.Detail
		}
	}
	var ge *checkpointd.GoneError
	if p.Extra == nil && errors.As(err, &ge) {
		p.Extra = goneExtra(ge)
	}
	p.Type = "https://checkpointd.dev/problems/" + p.Code
	p.Title = http.StatusText(p.Status)
	return p
}

// outcome is "ok" for no error, else the problem code err answers with:
// the outcome label of the metrics.
func outcome(err error) string {
	if err == nil {
		return "ok"
	}
	return problemFor(err).Code
}

// handle adapts a handlerFunc: it writes the problem for a returned error and
// logs server-side failures once.
func (a *api) handle(h handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		err := h(w, r)
		if err == nil {
			return
		}
		a.writeProblem(w, r, goneInScope(r, err))
	}
}

func (a *api) writeProblem(w http.ResponseWriter, r *http.Request, err error) {
	p := problemFor(err)
	if p.Status >= 500 {
		// The method and path are the client's too: redacted like the cause.
		a.log.ErrorContext(r.Context(), "request failed", slog.String("method", safeText(r.Method)),
			slog.String("path", safeText(r.URL.Path)), slog.String("code", p.Code), slog.String("err", safeText(err.Error())))
	}
	body, err := json.Marshal(p)
	if err != nil {
		body = []byte(`{"code":"internal"}`) // cannot happen: a Problem always marshals
	}
	body = append(body, '\n')
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	switch p.Code {
	case "contended":
		w.Header().Set("Retry-After", "1") // nothing was changed; contention passes
	case "too_many_watchers":
		w.Header().Set("Retry-After", watchRetryAfter)
	}
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}

// safeText is s as it may be echoed or logged: valid UTF-8, redacted. Text
// the redactor cannot read is not shown at all.
func safeText(s string) string {
	red, _, err := redact.String(strings.ToValidUTF8(s, "\uFFFD"))
	if err != nil {
		return "(not shown: it could not be redacted)"
	}
	return red
}
