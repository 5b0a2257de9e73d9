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

// idempotencyStore keeps the claims and replays of Idempotency-Key.
type idempotencyStore interface {
	ClaimIdempotency(ctx context.Context, scope, key, digest string) (string, *store.Replay, error)
	ReleaseIdempotency(ctx context.Context, scope, key, claim string) error
}

var errBadIdempotencyKey = errors.New("invalid Idempotency-Key")

// keyScope is where a request's Idempotency-Key lives (a
// session's keys, or for session creation the token's), and what the
// caller must pass before any key in it is looked up.
type keyScope struct {
	name string
	// admit, when set, runs before the lookup. A replay hands over the
	// stored response, and a conflict or an in-flight answer tells that the
	// key exists: a caller who may not see the scope's session is refused
	// first, as it would be without a key.
	admit func() error
	// conflict, when set, words the refusal of a key used for another
	// request, given that request's stored response (nil if it never
	// completed).
	conflict func(stored []byte) error
}

// tokenKeys is the key scope of session creation: the caller's own token,
// which has nothing to hide from itself.
func tokenKeys(r *http.Request) keyScope { return keyScope{name: "tok:" + principal(r).TokenID} }

// idempotencyKey reads the request's Idempotency-Key: absent, or exactly
// one header line of 1–255 characters that does not look like a secret
// (it is identifying, identifiers.go: stored as sent, and a rewritten key
// would make two requests one). Two lines are refused rather than joined:
// "a" and "b" are not the key "a,b", which neither sender meant.
// Errors: errBadIdempotencyKey.
func idempotencyKey(h http.Header) (key string, present bool, err error) {
	lines, present := h[http.CanonicalHeaderKey("Idempotency-Key")]
	if !present {
		return "", false, nil
	}
	if len(lines) != 1 {
		return "", true, fmt.Errorf("%w: send the header once; this request has it %d times", errBadIdempotencyKey, len(lines))
	}
	key = strings.TrimSpace(lines[0])
	switch {
	case key == "" || len(key) > checkpointd.MaxIdempotencyKeyLength:
		return "", true, fmt.Errorf("%w: it must be 1-%d characters", errBadIdempotencyKey, checkpointd.MaxIdempotencyKeyLength)
	case checkpointd.LooksLikeSecret(key):
		return "", true, fmt.Errorf("%w: it looks like a secret, and a key is stored as sent; use a random id", errBadIdempotencyKey)
	}
	return key, true, nil
}

// idempotent runs a creating write under the request's Idempotency-Key
// (IETF draft semantics). Without a key it simply writes. With one, the
// caller is admitted to the key's scope first, then the key is claimed for
// the request's digest: a completed request with the same digest is
// replayed byte for byte (200, Idempotent-Replayed: true); a different
// digest is 422 idempotency_conflict; a request still in flight is 409
// idempotency_in_flight. The response is stored in the write's own
// transaction, so what is replayed is exactly what was acknowledged.
func (a *api) idempotent(w http.ResponseWriter, r *http.Request, ks keyScope, digest string,
	write func(*store.Idempotency) (any, error), envelope func(any) any) error {
	k, present, err := idempotencyKey(r.Header)
	if err != nil {
		return err
	}
	if !present {
		res, err := write(nil)
		if err != nil {
			return err
		}
		return writeBody(w, http.StatusCreated, renderJSON(envelope(res)))
	}
	if ks.admit != nil {
		if err := ks.admit(); err != nil {
			return err
		}
	}
	claim, replay, err := a.Store.Idempotency.ClaimIdempotency(r.Context(), ks.name, k, digest)
	switch {
	case errors.Is(err, checkpointd.ErrIdempotencyConflict):
		a.Metrics.Idempotency(metrics.IdemConflict)
	case errors.Is(err, checkpointd.ErrIdempotencyInFlight):
		a.Metrics.Idempotency(metrics.IdemInFlight)
	}
	var ic *store.IdempotencyConflict
	if errors.As(err, &ic) && ks.conflict != nil {
		return ks.conflict(ic.Stored)
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
	idem := &store.Idempotency{Scope: ks.name, Key: k, Claim: claim, Status: http.StatusCreated,
		Render: func(res any) ([]byte, error) {
			body = renderJSON(envelope(res))
			return body, nil
		}}
	if _, err := write(idem); err != nil {
		// Release the key so a retry runs again; the request failed as a
		// whole, so there is nothing to replay.
		if rerr := a.Store.Idempotency.ReleaseIdempotency(context.WithoutCancel(r.Context()), ks.name, k, claim); rerr != nil {
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
