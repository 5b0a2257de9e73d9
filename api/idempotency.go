package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/metrics"
	"github.com/checkpointd/checkpointd/store"
)

var errBadIdempotencyKey = errors.New("invalid Idempotency-Key")

// idempotent runs a creating write under the request's Idempotency-Key
// (IETF draft semantics). Without a key it simply writes. With one, it
// claims the key for the request's digest: a completed request with the
// same digest is replayed byte for byte (200, Idempotent-Replayed: true); a
// different digest is 422 idempotency_conflict; a request still in flight is
// 409 idempotency_in_flight. The response is stored in the write's own
// transaction, so what is replayed is exactly what was acknowledged.
func (a *api) idempotent(w http.ResponseWriter, r *http.Request, scope, digest string,
	write func(*store.Idempotency) (any, error), envelope func(any) any) error {
	key, present := r.Header["Idempotency-Key"]
	if !present {
		res, err := write(nil)
		if err != nil {
			return err
		}
		return writeBody(w, http.StatusCreated, renderJSON(envelope(res)))
	}
	k := strings.TrimSpace(strings.Join(key, ","))
	if k == "" || len(k) > checkpointd.MaxIdempotencyKeyLength {
		return fmt.Errorf("%w: it must be 1-%d characters", errBadIdempotencyKey, checkpointd.MaxIdempotencyKeyLength)
	}
	claim, replay, err := a.Store.ClaimIdempotency(r.Context(), scope, k, digest)
	switch {
	case errors.Is(err, checkpointd.ErrIdempotencyConflict):
		a.Metrics.Idempotency(metrics.IdemConflict)
	case errors.Is(err, checkpointd.ErrIdempotencyInFlight):
		a.Metrics.Idempotency(metrics.IdemInFlight)
	}
	if err != nil {
		return err
	}
	if replay != nil {
		a.Metrics.Idempotency(metrics.IdemReplayed)
		w.Header().Set("Idempotent-Replayed", "true")
		return writeBody(w, http.StatusOK, replay.Body)
	}
	var body []byte
	idem := &store.Idempotency{Scope: scope, Key: k, Claim: claim, Status: http.StatusCreated,
		Render: func(res any) ([]byte, error) {
			body = renderJSON(envelope(res))
			return body, nil
		}}
	if _, err := write(idem); err != nil {
		// Release the key so a retry runs again; the request failed as a
		// whole, so there is nothing to replay.
		if rerr := a.Store.ReleaseIdempotency(context.WithoutCancel(r.Context()), scope, k, claim); rerr != nil {
			a.log.WarnContext(r.Context(), "release idempotency key", slog.Any("err", rerr))
		}
		return err
	}
	return writeBody(w, http.StatusCreated, body)
}

// renderJSON encodes a response body; replays reuse the exact bytes.
func renderJSON(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(fmt.Sprintf("api: response not encodable: %v", err)) // our own types always encode
	}
	return b.Bytes()
}

func writeBody(w http.ResponseWriter, status int, body []byte) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, err := w.Write(body)
	return err
}

// requestDigest is the keyed digest of a JSON request body in canonical
// form: the same request with other whitespace or key order digests alike.
func requestDigest(key, body []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", fmt.Errorf("%w: %v", checkpointd.ErrInvalidJSON, err)
	}
	canon, err := checkpointd.CanonicalJSON(v)
	if err != nil {
		return "", checkpointd.Invalid("", err.Error())
	}
	return checkpointd.Digest(key, canon), nil
}
