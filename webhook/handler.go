package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/errlog"
	"github.com/checkpointd/checkpointd/internal/logattr"
	"github.com/checkpointd/checkpointd/metrics"
	"github.com/checkpointd/checkpointd/store"
)

// Store is what the handler needs of persistence: a delivery and its effects
// commit in one transaction, and a delivery id seen before has no effect.
// Settle then re-judges the sessions bound to the refs a delivery moved.
type Store interface {
	ApplyDelivery(ctx context.Context, d store.DeliveryRecord, obs []checkpointd.Observation) (*checkpointd.ObservationEffects, bool, error)
	Settle(ctx context.Context) error
}

// Handler serves POST /webhooks/gitea: verify, parse, record with effects,
// answer. It answers fast: Gitea gives up after 5 s and never retries, and
// reconcile repairs whatever a lost delivery missed.
type Handler struct {
	Verifier *Verifier
	Store    Store
	Log      *slog.Logger
	// Metrics counts deliveries by event and outcome; nil counts nothing.
	Metrics *metrics.Metrics
	// Errors records refused deliveries durably (never the body or the
	// signature); nil records nothing.
	Errors *errlog.Recorder
	// BodyTimeout bounds the time from the headers to the end of the body
	// (DefaultBodyTimeout when 0): a sender that stalls holds one of the few
	// slots for unverified bodies, and no longer than that.
	BodyTimeout time.Duration
}

// DefaultBodyTimeout is Gitea's and Forgejo's whole delivery timeout: a
// body still coming after it is one whose answer nobody waits for.
const DefaultBodyTimeout = 5 * time.Second

// ServeHTTP handles one delivery.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	// Through chi's wrapper too (it unwraps); a recorder in tests has no
	// connection, and the deadline is then simply not set.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(start.Add(h.bodyTimeout()))
	d, err := h.Verifier.Read(r)
	if err != nil {
		h.reject(w, r, "", err)
		return
	}
	// The body is in and authenticated: lift the deadline, which would
	// otherwise end the request's context while the delivery is recorded.
	// The server sets its own again before reading the next request.
	_ = rc.SetReadDeadline(time.Time{})
	ev, err := Parse(d)
	if err != nil {
		h.reject(w, r, d.ID, err)
		return
	}
	outcome, answer, err := h.apply(r.Context(), d, ev)
	h.Metrics.WebhookDelivery(d.Event, outcome)
	if err != nil {
		h.Log.ErrorContext(r.Context(), "webhook delivery not recorded", slog.String("delivery", d.ID), slog.Any("err", err))
		problem(w, http.StatusServiceUnavailable, "store_unavailable", "the store cannot record the delivery; reconcile will catch up")
		return
	}
	h.logDelivery(r.Context(), d, outcome, answer)
	if outcome != "applied" {
		write(w, http.StatusOK, answer)
		return
	}
	// The connection closes after the settle below: the server reads the
	// next request on a connection only once the handler returns, and the
	// forge's next delivery must not wait behind this one's settle.
	w.Header().Set("Connection", "close")
	write(w, http.StatusOK, answer)
	// The answer is complete (it carries its length) and on its way; the
	// forge is not kept waiting while the sessions are re-judged. Every
	// answer that reports validity is read after a settle (store.Settled),
	// so the window is never visible.
	_ = http.NewResponseController(w).Flush()
	h.Metrics.WebhookAnswered(time.Since(start))
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), settleTimeout)
	defer cancel()
	if err := h.Store.Settle(ctx); err != nil {
		h.Log.WarnContext(ctx, "webhook: re-judging the sessions failed; the next read or worker pass retries",
			slog.String("delivery", d.ID), slog.Any("err", err))
	}
}

// logDelivery writes one line per delivery the daemon took, to match with
// the forge's "Recent Deliveries" by its id: applied and duplicate ones at
// info (with what they changed), ignored ones (events it does not act on)
// at debug.
func (h *Handler) logDelivery(ctx context.Context, d *Delivery, outcome string, answer map[string]any) {
	level := slog.LevelInfo
	if outcome == "ignored" {
		level = slog.LevelDebug
	}
	attrs := []slog.Attr{slog.String("delivery", d.ID), slog.String("event", d.Event), slog.String("outcome", outcome)}
	if e, ok := answer["effects"].(*checkpointd.ObservationEffects); ok && e != nil {
		attrs = append(attrs, slog.Int("live_refs", e.LiveRefs), logattr.Counts("sessions", e.Sessions),
			slog.Int("leases_released", e.LeasesReleased))
	}
	if reason, ok := answer["ignored"].(string); ok {
		attrs = append(attrs, slog.String("reason", reason))
	}
	if h.Log != nil {
		h.Log.LogAttrs(ctx, level, "webhook delivery", attrs...)
	}
}

// apply records a parsed delivery with its evidence and says what became of
// it (the outcome label of the deliveries metric: ignored, duplicate,
// applied, store_unavailable) and the answer to give.
func (h *Handler) apply(ctx context.Context, d *Delivery, ev Event) (outcome string, answer map[string]any, err error) {
	answer = map[string]any{"delivery": d.ID, "event": d.Event}
	obs, repo := observations(d, ev)
	if obs == nil {
		ig, _ := ev.(Ignored)
		answer["ignored"] = ig.Reason
		return "ignored", answer, nil
	}
	effects, dup, err := h.Store.ApplyDelivery(ctx, store.DeliveryRecord{ID: d.ID, Event: d.Event, Forge: d.Forge, Repo: repo}, obs)
	switch {
	case err != nil:
		return "store_unavailable", nil, err
	case dup:
		answer["duplicate"] = true
		return "duplicate", answer, nil
	}
	answer["effects"] = effects
	return "applied", answer, nil
}

// settleTimeout bounds the re-judging after an answer.
const settleTimeout = 30 * time.Second

func (h *Handler) bodyTimeout() time.Duration {
	if h.BodyTimeout > 0 {
		return h.BodyTimeout
	}
	return DefaultBodyTimeout
}

// observations turns an event into evidence; nil for events with none.
func observations(d *Delivery, ev Event) ([]checkpointd.Observation, string) {
	src := "webhook:" + d.ID
	switch e := ev.(type) {
	case Push:
		before := e.Before
		if IsZeroSHA(before) {
			before = "" // a new branch continues nothing
		}
		return []checkpointd.Observation{{Repo: e.Repo.FullName, RepoID: e.Repo.ID, Branch: e.Branch,
			Head: e.After, Before: before, Source: src}}, e.Repo.FullName
	case BranchDeleted:
		return []checkpointd.Observation{{Repo: e.Repo.FullName, RepoID: e.Repo.ID, Branch: e.Branch,
			End: checkpointd.RefDeleted, Source: src}}, e.Repo.FullName
	case PullRequest:
		o := checkpointd.Observation{Repo: e.Repo.FullName, RepoID: e.Repo.ID, PR: e.Number, Head: e.HeadSHA, Source: src}
		if e.Closed {
			// A deleted PR ends the way a closed one does — the same
			// invalidation and lease release — and says it was deleted.
			o.End = checkpointd.RefClosed
			switch {
			case e.Merged:
				o.End = checkpointd.RefMerged
			case e.Action == "deleted":
				o.End = checkpointd.RefDeleted
			}
		}
		return []checkpointd.Observation{o}, e.Repo.FullName
	}
	return nil, ""
}

// rejections map verification and parsing failures to statuses and codes.
var rejections = []struct {
	err    error
	status int
	code   string
}{
	{ErrNoSecret, http.StatusUnauthorized, "webhook_secret_not_configured"},
	{ErrMissingSignature, http.StatusUnauthorized, "missing_signature"},
	{ErrBadSignature, http.StatusUnauthorized, "bad_signature"},
	{ErrTooLarge, http.StatusRequestEntityTooLarge, "payload_too_large"},
	{ErrBusy, http.StatusServiceUnavailable, "webhook_busy"},
	{ErrSlowBody, http.StatusRequestTimeout, "request_timeout"},
	{ErrUnsupportedMediaType, http.StatusUnsupportedMediaType, "unsupported_media_type"},
	{ErrMethod, http.StatusMethodNotAllowed, "method_not_allowed"},
	{ErrMissingHeader, http.StatusBadRequest, "malformed_delivery"},
	{ErrMalformed, http.StatusBadRequest, "malformed_delivery"},
}

// reject answers a refused delivery, logs it once and records it durably,
// without the payload or the signature. The delivery id and event are the
// headers as sent: when verification failed they are unauthenticated, and
// the record says only what was claimed.
func (h *Handler) reject(w http.ResponseWriter, r *http.Request, id string, err error) {
	status, code := http.StatusBadRequest, "malformed_delivery"
	for _, rj := range rejections {
		if errors.Is(err, rj.err) {
			status, code = rj.status, rj.code
			break
		}
	}
	if id == "" {
		id = firstHeader(r.Header, "X-Forgejo-Delivery", "X-Gitea-Delivery", "X-Gogs-Delivery")
	}
	event := firstHeader(r.Header, "X-Forgejo-Event-Type", "X-Gitea-Event-Type", "X-Gogs-Event-Type",
		"X-Forgejo-Event", "X-Gitea-Event", "X-Gogs-Event")
	if !printable(id, maxDeliveryID) {
		id = ""
	}
	id = opaqueID(id)
	if !printable(event, maxEventName) {
		event = ""
	}
	h.Metrics.WebhookDelivery(event, code)
	h.Log.WarnContext(r.Context(), "webhook delivery rejected", slog.String("delivery", id), slog.String("code", code),
		slog.String("remote", r.RemoteAddr), slog.Any("err", err))
	// Recorded before answering, so the row exists when the forge (or a
	// test) sees the refusal; a recording failure is only logged.
	h.Errors.Record(r.Context(), checkpointd.ErrorRecord{Source: checkpointd.ErrorSourceWebhook, Code: code,
		Delivery: id, Event: event, Detail: err.Error()})
	// A refused sender's connection is closed: net/http would otherwise
	// read on through the rest of a body to reuse the connection.
	w.Header().Set("Connection", "close")
	if errors.Is(err, ErrBusy) {
		w.Header().Set("Retry-After", "1")
	}
	problem(w, status, code, err.Error())
}

func problem(w http.ResponseWriter, status int, code, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "https://checkpointd.dev/problems/" + code,
		"title": http.StatusText(status), "status": status, "code": code, "detail": detail})
}

// write answers with a length, so the forge has the whole answer at the
// flush even when the handler works on after it.
func write(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // maps of strings and counts
	}
	b = append(b, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
