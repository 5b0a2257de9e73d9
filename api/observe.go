package api

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/checkpointd/checkpointd"
)

// RequestIDHeader carries a request's id, in and out.
const RequestIDHeader = "X-Request-Id"

// maxRequestID bounds a request id taken from the client.
const maxRequestID = 64

// requestID gives every request an id: the client's X-Request-Id when it
// is short and plain (so a proxy's id joins the logs up), else a new one.
// It is in the request's context (middleware.GetReqID, and every log line
// through LogHandler) and in the response's X-Request-Id. An id that looks
// like a secret (redaction would change it) is not plain: it would be
// echoed and logged, and a rewritten one would join nothing up.
func requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(RequestIDHeader)
		if !plainID(id) || checkpointd.LooksLikeSecret(id) {
			id = checkpointd.NewID("req_")
		}
		w.Header().Set(RequestIDHeader, id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), middleware.RequestIDKey, id)))
	})
}

// plainID accepts 1–64 characters of letters, digits and -_.:/+= only: a
// request id lands in every log line of its request.
func plainID(s string) bool {
	if s == "" || len(s) > maxRequestID {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		switch c {
		case '-', '_', '.', ':', '/', '+', '=':
			ok = true
		}
		if !ok {
			return false
		}
	}
	return true
}

// quietRoutes are probed all day by machines: their access lines are
// logged at debug, not info.
var quietRoutes = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

// quietWhenAnswered are the routes whose answered requests (below 400)
// are logged at debug: heartbeats, which agents send all day, and the
// webhook, whose handler writes its own line per delivery. Answered reads
// (GET, HEAD) are quiet too: polls (`events --follow`, the console) would
// drown what changed. Refusals and failures stay at info.
var quietWhenAnswered = map[string]bool{"/v1/sessions/{id}/heartbeat": true, "/webhooks/gitea": true}

// accessLevel is the level of a request's access line.
func accessLevel(method, route string, status int) slog.Level {
	answered := status < 400
	if quietRoutes[route] || answered && (method == http.MethodGet || method == http.MethodHead || quietWhenAnswered[route]) {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

// observe writes one access log line per request and counts it in the
// metrics, by route pattern (never the path: it carries ids) and status.
// The line has the method (redacted: any token is a method to net/http),
// route, status, duration, size and request id; never the query string, a
// header value or a body.
func (a *api) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		defer func() {
			took := time.Since(start)
			status := ww.Status()
			if status == 0 {
				status = http.StatusOK // nothing written: net/http answers 200
			}
			route := routePattern(r)
			a.Metrics.HTTPRequest(r.Method, route, status, took)
			a.log.LogAttrs(r.Context(), accessLevel(r.Method, route, status), "request", slog.String("method", safeText(r.Method)), slog.String("route", route),
				slog.Int("status", status), slog.Duration("duration", took), slog.Int("bytes", ww.BytesWritten()))
		}()
		next.ServeHTTP(ww, r)
	})
}

// routePattern is the pattern the router matched, "unmatched" for none.
func routePattern(r *http.Request) string {
	rc := chi.RouteContext(r.Context())
	if rc == nil {
		return "unmatched"
	}
	p := rc.RoutePattern()
	if p == "" || p == "/*" {
		return "unmatched"
	}
	return p
}

// LogHandler wraps h so that every record logged with a request's context
// carries its request_id. serve wraps the daemon's logger with it, so the
// webhook handler, the store and the API all tag their lines alike;
// wrapping twice adds the attribute once.
func LogHandler(h slog.Handler) slog.Handler {
	if _, ok := h.(requestIDHandler); ok {
		return h
	}
	return requestIDHandler{h}
}

type requestIDHandler struct{ slog.Handler }

func (h requestIDHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := middleware.GetReqID(ctx); id != "" {
		r = r.Clone()
		r.AddAttrs(slog.String("request_id", id))
	}
	return h.Handler.Handle(ctx, r)
}

func (h requestIDHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return requestIDHandler{h.Handler.WithAttrs(as)}
}

func (h requestIDHandler) WithGroup(name string) slog.Handler {
	return requestIDHandler{h.Handler.WithGroup(name)}
}
