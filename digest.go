package checkpointd

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
)

// DigestPrefix versions the digest format so the algorithm can change
// without old digests being misread.
const DigestPrefix = "hmac-sha256:v1:"

// Digest returns the keyed digest of a canonical JSON document. It is
// computed over the document before redaction, so two documents that differ
// only in a secret have different digests, and keyed, so the digest says
// nothing about the secret to someone without the server key.
func Digest(key, canonical []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write(canonical)
	return DigestPrefix + hex.EncodeToString(m.Sum(nil))
}
