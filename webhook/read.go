// Package webhook authenticates and parses Gitea and Forgejo webhook
// deliveries: Verifier.Read checks the request and its HMAC signature before
// anything looks at the JSON, and Parse turns the verified payload into one of
// a few small events (Push, BranchDeleted, PullRequest, Ignored).
//
// Webhooks are hints: the forge delivers them concurrently, never retries and
// carries no trustworthy event time, so reconcile stays the authority.
package webhook

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
)

// Errors returned by Verifier.Read and Parse, bare or wrapped with %w for
// detail: match them with errors.Is. Only ErrMalformed comes from Parse.
var (
	// ErrNoSecret is returned for every delivery when no secret is
	// configured and unsigned deliveries are not allowed (fail closed).
	ErrNoSecret = errors.New("webhook: no secret configured")
	// ErrMissingSignature is returned when no signature header has a value;
	// empty headers and a bare "sha256=" are what a secret-less hook sends.
	ErrMissingSignature = errors.New("webhook: missing signature")
	// ErrBadSignature is returned for a signature that is not 64 hex digits
	// or matches none of the secrets.
	ErrBadSignature = errors.New("webhook: bad signature")
	// ErrMissingHeader is returned when the delivery id or event header is absent.
	ErrMissingHeader = errors.New("webhook: missing header")
	// ErrMalformed is returned for an unusable delivery id or event header, a
	// form body without one payload field, or (by Parse) a payload of a
	// handled event that does not decode or validate.
	ErrMalformed = errors.New("webhook: malformed delivery")
	// ErrTooLarge is returned when the body exceeds the cap.
	ErrTooLarge = errors.New("webhook: body too large")
	// ErrUnsupportedMediaType is returned for a content type other than JSON
	// or the form encoding.
	ErrUnsupportedMediaType = errors.New("webhook: unsupported media type")
	// ErrMethod is returned for any method but POST.
	ErrMethod = errors.New("webhook: method not allowed")
)

// DefaultMaxBody is the body cap used when Verifier.MaxBody is 0. Push
// payloads are bounded by the commit cap but PR bodies are not.
const DefaultMaxBody = 25 << 20

// Bounds on the header values that end up in the database and logs: the
// forges send a 36-character UUID and short snake_case event names.
const (
	maxDeliveryID = 128
	maxEventName  = 64
)

// Delivery is an authenticated webhook request.
type Delivery struct {
	ID      string // X-Forgejo-Delivery, else X-Gitea-Delivery, else X-Gogs-Delivery
	Event   string // fine event type (X-*-Event-Type), else the coarse X-*-Event of servers < 1.16
	Forge   string // "forgejo" when X-Forgejo-Event is present, else "gitea"
	Payload []byte // the signed JSON: the raw body, or the decoded payload field of a form
}

// Verifier authenticates deliveries. Secrets holds every accepted secret, so
// a secret can be rotated without losing deliveries; empty entries are
// ignored because anyone can compute an HMAC with an empty key. With no
// usable secret every delivery is refused with ErrNoSecret, unless
// AllowUnsigned is set, in which case nothing is checked. MaxBody caps the
// body (DefaultMaxBody when 0).
type Verifier struct {
	Secrets       [][]byte
	AllowUnsigned bool
	MaxBody       int64
}

// Read authenticates r and returns its delivery. It checks, in order: the
// method (ErrMethod), that a secret is configured (ErrNoSecret), the
// delivery id and event headers (ErrMissingHeader, or ErrMalformed when not
// short visible ASCII), the content type (ErrUnsupportedMediaType), the
// signature header (ErrMissingSignature, or ErrBadSignature when not 64 hex
// digits), the body size (ErrTooLarge), the form encoding (ErrMalformed)
// and finally the HMAC-SHA256 under each secret (ErrBadSignature). Any other
// error is the body's read error, wrapped. The JSON itself is not looked at
// before it is authenticated: that is Parse's job.
func (v *Verifier) Read(r *http.Request) (*Delivery, error) {
	if r.Method != http.MethodPost {
		return nil, fmt.Errorf("%w: %s", ErrMethod, r.Method)
	}
	secrets := v.secrets()
	if len(secrets) == 0 && !v.AllowUnsigned {
		return nil, ErrNoSecret
	}
	d, err := deliveryHeaders(r.Header)
	if err != nil {
		return nil, err
	}
	form, err := isForm(r.Header.Get("Content-Type"))
	if err != nil {
		return nil, err
	}
	var sig []byte
	if len(secrets) > 0 {
		// Before the body: an unsigned request is refused without reading it.
		if sig, err = signature(r.Header); err != nil {
			return nil, err
		}
	}
	body, err := readBody(r, v.maxBody())
	if err != nil {
		return nil, err
	}
	d.Payload = body
	if form {
		if d.Payload, err = formPayload(body); err != nil {
			return nil, err
		}
	}
	if len(secrets) > 0 && !verify(secrets, d.Payload, sig) {
		return nil, ErrBadSignature
	}
	return d, nil
}

func (v *Verifier) secrets() [][]byte {
	out := make([][]byte, 0, len(v.Secrets))
	for _, s := range v.Secrets {
		if len(s) > 0 {
			out = append(out, s)
		}
	}
	return out
}

func (v *Verifier) maxBody() int64 {
	if v.MaxBody > 0 {
		return v.MaxBody
	}
	return DefaultMaxBody
}

// firstHeader returns the first non-empty value among names: Forgejo sends
// its own family next to Gitea's, and a bare Gitea or Gogs server only its own.
func firstHeader(h http.Header, names ...string) string {
	for _, n := range names {
		if v := h.Get(n); v != "" {
			return v
		}
	}
	return ""
}

func deliveryHeaders(h http.Header) (*Delivery, error) {
	d := &Delivery{
		ID: firstHeader(h, "X-Forgejo-Delivery", "X-Gitea-Delivery", "X-Gogs-Delivery"),
		// The fine type tells pull_request_sync from pull_request; the
		// coarse X-*-Event is all that servers before 1.16 send.
		Event: firstHeader(h, "X-Forgejo-Event-Type", "X-Gitea-Event-Type", "X-Gogs-Event-Type",
			"X-Forgejo-Event", "X-Gitea-Event", "X-Gogs-Event"),
		Forge: "gitea",
	}
	if h.Get("X-Forgejo-Event") != "" {
		d.Forge = "forgejo"
	}
	if d.ID == "" {
		return nil, fmt.Errorf("%w: X-Gitea-Delivery", ErrMissingHeader)
	}
	if d.Event == "" {
		return nil, fmt.Errorf("%w: X-Gitea-Event", ErrMissingHeader)
	}
	if !printable(d.ID, maxDeliveryID) {
		return nil, fmt.Errorf("%w: delivery id", ErrMalformed)
	}
	if !printable(d.Event, maxEventName) {
		return nil, fmt.Errorf("%w: event header", ErrMalformed)
	}
	return d, nil
}

// printable reports whether s is 1..max bytes of visible ASCII, safe to
// store and log.
func printable(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

func isForm(contentType string) (bool, error) {
	mt, _, err := mime.ParseMediaType(contentType)
	switch {
	case err != nil:
		return false, fmt.Errorf("%w: %q", ErrUnsupportedMediaType, contentType)
	case mt == "application/json":
		return false, nil
	case mt == "application/x-www-form-urlencoded":
		return true, nil
	}
	return false, fmt.Errorf("%w: %s", ErrUnsupportedMediaType, mt)
}

// readBody reads at most max bytes and fails past that instead of reading
// on: the forge gives up after 5 s anyway.
func readBody(r *http.Request, max int64) ([]byte, error) {
	if r.ContentLength > max {
		return nil, ErrTooLarge
	}
	if r.Body == nil {
		return nil, nil
	}
	var buf bytes.Buffer
	// Size the buffer from Content-Length only up to 1 MiB: the header is
	// unauthenticated, and a claimed 25 MiB should not be allocated up front.
	if n := r.ContentLength; n > 0 && n <= 1<<20 {
		buf.Grow(int(n) + bytes.MinRead) // one read past the end sees EOF
	}
	_, err := buf.ReadFrom(io.LimitReader(r.Body, max+1))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return nil, ErrTooLarge // a cap set further out, by http.MaxBytesReader
	case err != nil:
		return nil, fmt.Errorf("webhook: read body: %w", err)
	case int64(buf.Len()) > max:
		return nil, ErrTooLarge
	}
	return buf.Bytes(), nil
}

// formPayload returns the decoded payload field of a form delivery, which is
// what the forge signed. r.ParseForm is not used: it would also merge the
// query string and apply its own cap.
func formPayload(body []byte) ([]byte, error) {
	vals, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, fmt.Errorf("%w: form body: %v", ErrMalformed, err)
	}
	p := vals["payload"]
	if len(p) != 1 || p[0] == "" {
		return nil, fmt.Errorf("%w: form body needs exactly one payload field", ErrMalformed)
	}
	return []byte(p[0]), nil
}
