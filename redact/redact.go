// The API: String, Tree and its walk, the marker kinds and the fixed-point loop.

package redact

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// ErrUnredactable reports a value the redactor cannot process (invalid UTF-8,
// a value type it does not know): the write must be refused, never stored
// raw.
var ErrUnredactable = errors.New("value cannot be redacted")

// Kinds name what a "[REDACTED:<kind>]" marker replaced. They are a stable
// contract documented in docs/redaction.md: operators search for them.
const (
	kindAuthorization = "authorization"
	kindBearer        = "bearer"
	kindCookie        = "cookie"
	kindURLUserinfo   = "url_userinfo"
	kindQuerySecret   = "query_secret"
	kindSecretField   = "secret_field"
	kindPEM           = "pem_private_key"
	kindJWT           = "jwt"
	kindGitHub        = "github_token"
	kindGitLab        = "gitlab_token"
	kindOpenAI        = "openai_key"
	kindAnthropic     = "anthropic_key"
	kindSlack         = "slack_token"
	kindAWSKeyID      = "aws_access_key_id"
	kindAWSSecret     = "aws_secret_access_key"
	kindGitea         = "gitea_token"
	kindCheckpointd   = "checkpointd_token"
	kindNPM           = "npm_token"
	kindHuggingFace   = "huggingface_token"
	kindGoogleAPIKey  = "google_api_key"
	kindStripe        = "stripe_key"
	kindSendGrid      = "sendgrid_key"
	kindTwilio        = "twilio_api_key"
	kindDigitalOcean  = "digitalocean_token"
	kindSlackWebhook  = "slack_webhook"
	kindAzure         = "azure_key"
	kindRegistryAuth  = "registry_auth"
)

const markerPrefix = "[REDACTED:"

// String returns s with every secret replaced by "[REDACTED:<kind>]"
// and how many were replaced. Markers already in s are left alone and not
// counted, so redaction is idempotent. A string with nothing to redact is
// returned as is, without allocating.
//
// Errors: ErrUnredactable when s is not
// valid UTF-8.
func String(s string) (string, int, error) {
	if !utf8.ValidString(s) {
		return "", 0, fmt.Errorf("%w: invalid UTF-8 at byte %d", ErrUnredactable, invalidAt(s))
	}
	out, n := redact(s)
	return out, n, nil
}

// Tree redacts every string in a JSON tree as decoded by encoding/json
// with UseNumber (map[string]any, []any, string, json.Number, float64, bool,
// nil) and returns a new tree (the input is not modified) with the number of
// redactions. Every string under a key named like a secret (password, token,
// api_key, authorization, cookie…, at any depth below it) is replaced as a
// whole; other strings are scanned like String. Keys are not redacted.
//
// Errors: ErrUnredactable, naming the JSON
// pointer of the value, for a string or key that is not valid UTF-8 or a
// value of another Go type: failing closed beats storing what was not seen.
func Tree(v any) (any, int, error) {
	t := treeRedactor{path: make([]pathElem, 0, 8)}
	out, err := t.walk(v, famNone)
	if err != nil {
		return nil, 0, err
	}
	return out, t.count, nil
}

type treeRedactor struct {
	count int
	path  []pathElem // where walk is, for error messages
}

// pathElem is a map key or, when key is unset, an array index; it is turned
// into text only on failure, so the walk does not allocate for it.
type pathElem struct {
	key   string
	index int
	isKey bool
}

func (t *treeRedactor) walk(v any, fam family) (any, error) {
	switch x := v.(type) {
	case nil, bool, json.Number, float64:
		return v, nil
	case string:
		if !utf8.ValidString(x) {
			return nil, t.fail("invalid UTF-8")
		}
		var out string
		var n int
		if fam == famRegistry && !looksCredential(strings.TrimSpace(x)) {
			fam = famNone
		}
		if fam == famNone {
			out, n = redact(x)
		} else {
			out, n = redactField(x, fam)
		}
		if n == 0 {
			return v, nil // boxing a new string into an interface would allocate
		}
		t.count += n
		return out, nil
	case map[string]any:
		if fam == famRegistry { // "auth" holds a credential string, never a subtree
			fam = famNone
		}
		out := make(map[string]any, len(x))
		for k, e := range x {
			t.path = append(t.path, pathElem{key: k, isKey: true})
			if !utf8.ValidString(k) {
				return nil, t.fail("key is not valid UTF-8")
			}
			f := fam
			if f == famNone {
				f = classifyKey(k, false)
			}
			r, err := t.walk(e, f)
			if err != nil {
				return nil, err
			}
			out[k] = r
			t.path = t.path[:len(t.path)-1]
		}
		return out, nil
	case []any:
		if fam == famRegistry {
			fam = famNone
		}
		out := make([]any, len(x))
		for i, e := range x {
			t.path = append(t.path, pathElem{index: i})
			r, err := t.walk(e, fam)
			if err != nil {
				return nil, err
			}
			out[i] = r
			t.path = t.path[:len(t.path)-1]
		}
		return out, nil
	default:
		return nil, t.fail(fmt.Sprintf("unsupported value type %T", v))
	}
}

// fail names the value by JSON pointer, never by content: it may be a secret.
func (t *treeRedactor) fail(msg string) error {
	var b strings.Builder
	for _, e := range t.path {
		p := fmt.Sprint(e.index)
		if e.isKey {
			// Redacted before it is escaped: "//" as "~1~1" hides a URL.
			p = strings.ToValidUTF8(e.key, "\uFFFD")
			if red, _, err := String(p); err == nil {
				p = red
			} else {
				p = "[REDACTED:unreadable]"
			}
		}
		b.WriteByte('/')
		b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(p))
	}
	return fmt.Errorf("%w: %s: %s", ErrUnredactable, b.String(), msg)
}

// redactField replaces a whole string found under a secret-named key.
func redactField(s string, fam family) (string, int) {
	if fam == famCookie {
		if isPlaceholder(strings.TrimSpace(s)) {
			return s, 0
		}
		return markerPrefix + kindCookie + "]", 1
	}
	off, tokenCtx := 0, fam == famToken
	if fam == famAuth {
		off, tokenCtx = authSplit(s)
	}
	v := strings.TrimSpace(s[off:])
	if isPlaceholder(v) {
		return s, 0
	}
	kind := refine(v, tokenCtx)
	if kind == "" {
		kind = fieldKind(fam, ':')
	}
	return s[:off] + markerPrefix + kind + "]", 1
}

// maxPasses bounds the passes of redact. A replacement can change what a
// later decision sees (a marker is shorter than the key it replaced, and
// ends a value where the key's spaces did not), so redact repeats until a
// pass finds nothing: that makes it idempotent by construction. Two passes
// suffice in practice; the bound keeps hostile input cheap.
const maxPasses = 4

// redact redacts s to a fixed point and returns it with the number of
// markers it inserted. It allocates only when something was found.
func redact(s string) (string, int) {
	total := 0
	for range maxPasses {
		out, n := redactOnce(s)
		if n == 0 {
			break
		}
		s, total = out, total+n
	}
	return s, total
}

// redactOnce scans s once and rewrites it only when something was found.
func redactOnce(s string) (string, int) {
	sc := scanner{s: s}
	sc.run()
	if len(sc.spans) == 0 {
		return s, 0
	}
	var b strings.Builder
	b.Grow(len(s) + 24*len(sc.spans))
	prev := 0
	for _, sp := range sc.spans {
		b.WriteString(s[prev:sp.start])
		b.WriteString(markerPrefix)
		b.WriteString(sp.kind)
		b.WriteByte(']')
		prev = sp.end
	}
	b.WriteString(s[prev:])
	return b.String(), len(sc.spans)
}

func invalidAt(s string) int {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return i
			}
		}
	}
	return len(s)
}
