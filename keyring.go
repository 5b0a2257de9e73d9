package checkpointd

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// KeySize is the size of a server key: 256 bits.
const KeySize = 32

// ErrKey reports unusable key material: malformed, missing or mismatched.
var ErrKey = errors.New("key")

var keyIDPattern = regexp.MustCompile(`^k[0-9]{1,6}$`)

// Keyring holds the server keys. Every key stays readable; the newest seals
// new data; the oldest keys the idempotency digests, so a rotation does not
// change what a retried request digests to.
type Keyring struct {
	ids  []string // oldest first
	keys map[string][]byte
	aead map[string]cipher.AEAD
}

// NewKey returns 32 fresh random bytes.
func NewKey() []byte {
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		panic("checkpointd: no randomness: " + err.Error())
	}
	return k
}

// ParseKeyring reads key material: one key per line (or per ';', handy in
// an environment variable) as "<id> <base64>" (ids k1, k2, … oldest first),
// or a single bare base64 key, which is k1.
// Errors wrap ErrKey and say what is wrong, never the key itself.
func ParseKeyring(text string) (*Keyring, error) {
	kr := &Keyring{keys: map[string][]byte{}, aead: map[string]cipher.AEAD{}}
	lines := strings.FieldsFunc(strings.TrimSpace(text), func(r rune) bool { return r == '\n' || r == ';' })
	for i, line := range lines {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		id, enc, ok := strings.Cut(line, " ")
		if !ok {
			if len(lines) > 1 {
				return nil, fmt.Errorf("%w: malformed: line %d: want \"k<number> <base64 key>\"", ErrKey, i+1)
			}
			id, enc = "k1", line
		}
		enc = strings.TrimSpace(enc)
		if !keyIDPattern.MatchString(id) {
			// Never quote the line: it may be (part of) the key.
			return nil, fmt.Errorf("%w: malformed: line %d: want \"k<number> <base64 key>\"", ErrKey, i+1)
		}
		if _, dup := kr.keys[id]; dup {
			return nil, fmt.Errorf("%w: malformed: key id %s appears twice", ErrKey, id)
		}
		key, err := base64.StdEncoding.DecodeString(enc)
		if err != nil {
			return nil, fmt.Errorf("%w: key %s is malformed: want the base64 encoding of %d random bytes", ErrKey, id, KeySize)
		}
		if len(key) != KeySize {
			return nil, fmt.Errorf("%w: key %s is malformed: want %d bytes, got %d", ErrKey, id, KeySize, len(key))
		}
		if err := kr.add(id, key); err != nil {
			return nil, err
		}
	}
	if len(kr.ids) == 0 {
		return nil, fmt.Errorf("%w: malformed: no key found", ErrKey)
	}
	return kr, nil
}

func (kr *Keyring) add(id string, key []byte) error {
	block, err := aes.NewCipher(kr.derive(key, "seal "+id))
	if err != nil {
		return err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return err
	}
	kr.ids = append(kr.ids, id)
	kr.keys[id] = key
	kr.aead[id] = aead
	return nil
}

// EncodeKey renders raw key bytes as the key file writes them.
func EncodeKey(key []byte) string { return base64.StdEncoding.EncodeToString(key) }

// Format renders the keyring in the key file format.
func (kr *Keyring) Format() string {
	var b strings.Builder
	for _, id := range kr.ids {
		b.WriteString(id + " " + base64.StdEncoding.EncodeToString(kr.keys[id]) + "\n")
	}
	return b.String()
}

// Rotate adds a fresh key that seals from now on and returns its id.
func (kr *Keyring) Rotate() (string, error) {
	n := 0
	for _, id := range kr.ids {
		var v int
		fmt.Sscanf(id, "k%d", &v)
		n = max(n, v)
	}
	id := fmt.Sprintf("k%d", n+1)
	return id, kr.add(id, NewKey())
}

// IDs returns the key ids, oldest first.
func (kr *Keyring) IDs() []string { return append([]string(nil), kr.ids...) }

// Active is the id of the key that seals new data.
func (kr *Keyring) Active() string { return kr.ids[len(kr.ids)-1] }

// Fingerprint identifies key id without revealing it.
func (kr *Keyring) Fingerprint(id string) string {
	key, ok := kr.keys[id]
	if !ok {
		return ""
	}
	sum := sha256.Sum256(append([]byte("checkpointd key fingerprint\x00"), key...))
	return "sha256:" + hex.EncodeToString(sum[:8])
}

// DigestKey is the key of idempotency digests, derived from the oldest key.
func (kr *Keyring) DigestKey() []byte { return kr.derive(kr.keys[kr.ids[0]], "digest v1") }

// derive gives every purpose its own subkey, so one stored secret never
// serves two algorithms.
func (kr *Keyring) derive(master []byte, purpose string) []byte {
	k, err := hkdf.Key(sha256.New, master, nil, "checkpointd "+purpose, KeySize)
	if err != nil {
		panic(err) // only for lengths HKDF cannot produce
	}
	return k
}

// Seal encrypts plaintext with AES-256-GCM under the active key. aad binds
// the ciphertext to where it is stored, so a sealed value moved to another
// row does not open. The result is "<key id>:<base64(nonce|ciphertext)>".
func (kr *Keyring) Seal(plaintext, aad []byte) string {
	id := kr.Active()
	aead := kr.aead[id]
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plaintext)+aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		panic("checkpointd: no randomness: " + err.Error())
	}
	return id + ":" + base64.RawStdEncoding.EncodeToString(aead.Seal(nonce, nonce, plaintext, aad))
}

// Open decrypts a value made by Seal with the same aad. Errors wrap ErrKey:
// an unknown key id, or a value that does not authenticate.
func (kr *Keyring) Open(sealed string, aad []byte) ([]byte, error) {
	id, enc, ok := strings.Cut(sealed, ":")
	aead := kr.aead[id]
	if !ok || aead == nil {
		return nil, fmt.Errorf("%w: sealed with unknown key %q", ErrKey, id)
	}
	raw, err := base64.RawStdEncoding.DecodeString(enc)
	if err != nil || len(raw) < aead.NonceSize() {
		return nil, fmt.Errorf("%w: sealed value is malformed", ErrKey)
	}
	pt, err := aead.Open(nil, raw[:aead.NonceSize()], raw[aead.NonceSize():], aad)
	if err != nil {
		return nil, fmt.Errorf("%w: sealed value does not authenticate under key %s", ErrKey, id)
	}
	return pt, nil
}
