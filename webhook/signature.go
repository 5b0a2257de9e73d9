package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
)

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
