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
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/checkpointd/checkpointd"
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
	// ErrTooLarge is returned when the body exceeds the cap, by its
	// Content-Length before any of it is read, else as soon as it passes.
	ErrTooLarge = errors.New("webhook: body too large")
	// ErrBusy is returned when MaxUnverified bodies are already being read
	// and none is done within slotWait.
	ErrBusy = errors.New("webhook: too many deliveries being read")
	// ErrSlowBody is returned when the body stops coming before it ends
	// (the handler's read deadline passed).
	ErrSlowBody = errors.New("webhook: body not received in time")
	// ErrUnsupportedMediaType is returned for a content type other than JSON
	// or the form encoding.
	ErrUnsupportedMediaType = errors.New("webhook: unsupported media type")
	// ErrMethod is returned for any method but POST.
	ErrMethod = errors.New("webhook: method not allowed")
)

// DefaultMaxBody is the body cap used when Verifier.MaxBody is 0: 1 MiB,
// 57 times the largest delivery captured from Gitea 1.25.4 and Forgejo
// 15.0.3 (18,139 bytes, a form-encoded PR close; the largest JSON one is a
// push listing Forgejo's 15 commits, 15,153 bytes). Pushes are bounded by
// the forges' commit caps; PR descriptions and the file lists of commits
// are not, hence the margin.
const DefaultMaxBody = 1 << 20

// DefaultMaxUnverified is how many bodies are read and checked at once
// when Verifier.MaxUnverified is 0: above the 10 workers a Gitea or
// Forgejo instance delivers with at most, and with DefaultMaxBody no more
// than 16 MiB of unauthenticated bytes held.
const DefaultMaxUnverified = 16

// slotWait is how long a delivery waits for a slot when all are taken. A
// burst of real deliveries clears in that time (each is read and checked
// in milliseconds); slots held by slow senders do not, and the forge must
// not be kept waiting: it gives up after 5 s and never retries.
const slotWait = 250 * time.Millisecond

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
// body (DefaultMaxBody when 0). MaxUnverified bounds the bodies being read
// and checked at once (DefaultMaxUnverified when 0): unauthenticated
// senders cannot make the daemon hold more than MaxUnverified × MaxBody.
type Verifier struct {
	Secrets       [][]byte
	AllowUnsigned bool
	MaxBody       int64
	MaxUnverified int

	slotsOnce sync.Once
	slots     chan struct{} // one token per body being read
}

// Read authenticates r and returns its delivery. It checks, in order: the
// method (ErrMethod), that a secret is configured (ErrNoSecret), the
// delivery id and event headers (ErrMissingHeader, or ErrMalformed when not
// short visible ASCII), the content type (ErrUnsupportedMediaType), the
// signature header (ErrMissingSignature, or ErrBadSignature when not 64 hex
// digits), the declared body size (ErrTooLarge), a free slot among
// MaxUnverified (ErrBusy after waiting slotWait), the body as it is read
// (ErrTooLarge as soon as it passes MaxBody, ErrSlowBody when the read
// deadline passes), the form encoding (ErrMalformed) and finally the
// HMAC-SHA256 under each secret (ErrBadSignature). Any other error is the
// body's read error, wrapped. The slot is held until Read returns, so no
// more than MaxUnverified bodies are ever held unauthenticated. The JSON
// itself is not looked at before it is authenticated: that is Parse's job.
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
	if r.ContentLength > v.maxBody() {
		return nil, ErrTooLarge // refused on the header, nothing read
	}
	release, err := v.acquire(r)
	if err != nil {
		return nil, err
	}
	defer release()
	buf := bodyBuffers.Get().(*[]byte)
	defer bodyBuffers.Put(buf)
	body, err := readBody(r, v.maxBody(), buf)
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
	if !form {
		d.Payload = bytes.Clone(body) // the buffer serves the next body
	}
	return d, nil
}

// bodyBuffers recycles the buffers bodies are read into: a refused body's
// buffer serves the next delivery instead of waiting for the collector, so
// a flood costs about the slots' buffers rather than garbage piling up to
// the GC target (the daemon runs with GOGC=400). At most MaxUnverified are
// in use at once, so the pool holds no more than that (and the previous
// cycle's, which the collector drops).
var bodyBuffers = sync.Pool{New: func() any { return new([]byte) }}

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

// acquire takes a slot for one body, waiting at most slotWait (or until the
// request is gone) when all are taken.
func (v *Verifier) acquire(r *http.Request) (release func(), err error) {
	slots := v.slotChan()
	release = func() { <-slots }
	select {
	case slots <- struct{}{}:
		return release, nil
	default:
	}
	wait := time.NewTimer(slotWait)
	defer wait.Stop()
	select {
	case slots <- struct{}{}:
		return release, nil
	case <-wait.C:
	case <-r.Context().Done():
	}
	return nil, fmt.Errorf("%w: %d bodies are being read", ErrBusy, cap(slots))
}

// slotChan makes the slots on first use: a Verifier is built as a literal.
func (v *Verifier) slotChan() chan struct{} {
	v.slotsOnce.Do(func() {
		n := v.MaxUnverified
		if n <= 0 {
			n = DefaultMaxUnverified
		}
		v.slots = make(chan struct{}, n)
	})
	return v.slots
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
	d.ID = opaqueID(d.ID)
	if !printable(d.Event, maxEventName) {
		return nil, fmt.Errorf("%w: event header", ErrMalformed)
	}
	return d, nil
}

// opaqueID is a delivery id as it may be stored, answered and logged.
// Gitea and Forgejo send a random UUID; an id that looks like a secret to
// the redactor is kept as its digest instead, which still tells one
// delivery from another (dedup) and holds nothing of what was sent.
func opaqueID(id string) string {
	if id == "" || !checkpointd.LooksLikeSecret(id) {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "sha256:" + hex.EncodeToString(sum[:16])
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

// readBody reads the whole body into *into, which it grows to at most
// limit+1 bytes (and leaves grown, for the next body), and fails with
// ErrTooLarge as soon as the body passes limit instead of reading on: a
// chunked body declares no length to refuse it by. A declared length sizes
// the buffer at once; it is at most limit. The body returned aliases *into.
func readBody(r *http.Request, limit int64, into *[]byte) ([]byte, error) {
	if r.Body == nil {
		return nil, nil
	}
	size := int64(bytes.MinRead)
	if r.ContentLength >= 0 {
		size = r.ContentLength + 1 // one read past the end sees EOF
	}
	buf := grown((*into)[:0], min(size, limit+1))
	defer func() { *into = buf[:0] }()
	for {
		if len(buf) == cap(buf) {
			next := int64(max(2*cap(buf), bytes.MinRead)) // doubling …
			if cap(buf) >= doublingLimit {
				next = limit + 1 // … then the cap at once
			}
			buf = grown(buf, min(next, limit+1))
		}
		n, err := r.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		switch {
		case int64(len(buf)) > limit:
			return nil, ErrTooLarge
		case err == io.EOF:
			return buf, nil
		case err != nil:
			return nil, readError(err)
		}
	}
}

// grown returns buf with room for n bytes in all, allocating exactly that
// (but for the allocator's rounding) when it must: append's own growth
// could overshoot the cap by a quarter.
func grown(buf []byte, n int64) []byte {
	if int64(cap(buf)) >= n {
		return buf
	}
	return append(make([]byte, 0, n), buf...)
}

// doublingLimit is where a body of unknown length stops growing by
// doubling and takes the cap's worth at once: past the largest real
// delivery (18 KiB), doubling on would leave each smaller buffer behind as
// garbage, and a body that large is near the cap or refused anyway.
const doublingLimit = 64 << 10

func readError(err error) error {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return ErrTooLarge // a cap set further out, by http.MaxBytesReader
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%w: %v", ErrSlowBody, err)
	}
	return fmt.Errorf("webhook: read body: %w", err)
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

// signatureHeaders are the headers carrying a bare hex HMAC-SHA256, in order
// of preference. Forgejo sends all of them with the same value.
var signatureHeaders = []string{"X-Forgejo-Signature", "X-Gitea-Signature", "X-Gogs-Signature"}

// hubSignature carries the same HMAC as "sha256=" + hex. X-Hub-Signature
// (SHA-1) is never used: SHA-256 is always sent next to it.
const (
	hubSignature = "X-Hub-Signature-256"
	hubPrefix    = "sha256="
)

// signature returns the decoded HMAC of the first signature header that has
// a value. A forge whose hook has no secret still sends the headers, empty
// or as a bare "sha256=", so those count as missing rather than present:
// treating them as "signed" would accept unsigned traffic.
// The first non-empty header decides; a malformed one is not skipped in
// favour of the next.
func signature(h http.Header) ([]byte, error) {
	name, val := "", ""
	for _, n := range signatureHeaders {
		if v := h.Get(n); v != "" {
			name, val = n, v
			break
		}
	}
	if val == "" {
		if v := h.Get(hubSignature); v != "" && v != hubPrefix {
			hexed, ok := strings.CutPrefix(v, hubPrefix)
			if !ok {
				return nil, fmt.Errorf("%w: %s lacks the %q prefix", ErrBadSignature, hubSignature, hubPrefix)
			}
			name, val = hubSignature, hexed
		}
	}
	if val == "" {
		return nil, ErrMissingSignature
	}
	if len(val) != 2*sha256.Size {
		return nil, fmt.Errorf("%w: %s is not %d hex digits", ErrBadSignature, name, 2*sha256.Size)
	}
	sig, err := hex.DecodeString(val)
	if err != nil {
		return nil, fmt.Errorf("%w: %s is not hex", ErrBadSignature, name)
	}
	return sig, nil
}

// verify reports whether sig is the HMAC-SHA256 of payload under any of the
// secrets. Each comparison is constant time (hmac.Equal); stopping at the
// first match reveals at most which secret matched, not the MAC.
func verify(secrets [][]byte, payload, sig []byte) bool {
	for _, s := range secrets {
		m := hmac.New(sha256.New, s)
		m.Write(payload)
		if hmac.Equal(m.Sum(nil), sig) {
			return true
		}
	}
	return false
}
