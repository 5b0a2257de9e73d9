// Redaction rules: token shapes, placeholders, secret and safe key names, and their lookups.

package redact

import "strings"

// tokenAt matches a token recognisable by its shape alone at st and returns
// its end and kind, or 0. Bare 40-hex strings are never matched here: they
// are commit SHAs unless the context says otherwise (refine).
func tokenAt(s string, st int) (int, string) {
	r := s[st:]
	n := len(r)
	switch {
	case n < 8:
	case r[0] == 'g':
		if strings.HasPrefix(r, "github_pat_") {
			if e := run(r, 11, cB64url&^cDash); e-11 >= 22 {
				return st + e, kindGitHub
			}
		} else if r[1] == 'h' && r[3] == '_' && strings.IndexByte("pousr", r[2]) >= 0 {
			if e := run(r, 4, cAlnum); e-4 >= 30 {
				return st + e, kindGitHub
			}
		} else if p := hasAnyPrefix(r, "glpat-", "gldt-", "glrt-", "glptt-"); p > 0 {
			if e := run(r, p, cB64url); e-p >= 20 {
				return st + e, kindGitLab
			}
		}
	case r[0] == 'r' || r[0] == 's' && r[1] == 'k' && r[2] == '_':
		// Stripe secret and restricted keys; publishable pk_ keys are public.
		if p := hasAnyPrefix(r, "sk_live_", "sk_test_", "rk_live_", "rk_test_"); p > 0 {
			if e := run(r, p, cAlnum); e-p >= 24 && looksRandom(r[p:e]) {
				return st + e, kindStripe
			}
		}
	case r[0] == 'w':
		if strings.HasPrefix(r, "whsec_") { // Stripe webhook signing secrets
			if e := run(r, 6, cAlnum); e-6 >= 24 && looksRandom(r[6:e]) {
				return st + e, kindStripe
			}
		}
	case r[0] == 'S':
		if r[1] == 'G' && r[2] == '.' { // SendGrid: SG.<22>.<43>, base64url
			if d := run(r, 3, cB64url); d-3 >= 16 && d < n && r[d] == '.' {
				if e := run(r, d+1, cB64url); e-d-1 >= 30 {
					return st + e, kindSendGrid
				}
			}
		} else if r[1] == 'K' && n >= 34 && run(r, 2, cHex) == 34 && (n == 34 || !isAlnum(r[34])) {
			return st + 34, kindTwilio // Twilio API key SIDs: SK + 32 hex
		}
	case r[0] == 'd':
		// DigitalOcean personal, OAuth and refresh tokens: 64 hex.
		if p := hasAnyPrefix(r, "dop_v1_", "doo_v1_", "dor_v1_"); p > 0 {
			if e := run(r, p, cHex); e-p >= 64 {
				return st + e, kindDigitalOcean
			}
		}
	case r[0] == 's' && r[1] == 'k' && r[2] == '-':
		kind := kindOpenAI
		p := hasAnyPrefix(r, "sk-ant-", "sk-proj-", "sk-svcacct-", "sk-admin-")
		if p == len("sk-ant-") {
			kind = kindAnthropic
		}
		if p == 0 { // legacy keys: a long alphanumeric run right after sk-
			if run(r, 3, cAlnum)-3 < 20 {
				return 0, ""
			}
			p = 3
		}
		if e := run(r, p, cB64url); e-p >= 20 && hasClass(r[p:e], cDigit) && hasClass(r[p:e], cAlpha) {
			return st + e, kind
		}
	case r[0] == 'x':
		p := 0
		if strings.HasPrefix(r, "xoxe.xox") { // a rotating token: xoxe.xoxp-…
			r, st = r[5:], st+5
		}
		if len(r) >= 8 && r[1] == 'o' && r[2] == 'x' && r[4] == '-' && strings.IndexByte("abposre", r[3]) >= 0 {
			p = 5
		} else if strings.HasPrefix(r, "xapp-") {
			p = 5
		}
		if p > 0 {
			if e := run(r, p, cAlnum|cDash); e-p >= 10 && hasClass(r[p:e], cDigit) {
				return st + e, kindSlack
			}
		}
	case r[0] == 'n':
		if strings.HasPrefix(r, "npm_") { // npm access tokens: 36 base62 characters
			if e := run(r, 4, cAlnum); e-4 >= 36 && looksRandom(r[4:e]) {
				return st + e, kindNPM
			}
		}
	case r[0] == 'h':
		if r[1] == 'f' && r[2] == '_' { // Hugging Face: 34 or more letters
			if e := run(r, 3, cAlnum); e-3 >= 34 && hasClass(r[3:e], cUpper) && hasClass(r[3:e], cLower) {
				return st + e, kindHuggingFace
			}
		}
	case r[0] == 'c':
		if strings.HasPrefix(r, "cpd_") { // checkpointd's own API tokens (token.go)
			if e := run(r, 4, cB64url); e-4 >= 32 {
				return st + e, kindCheckpointd
			}
		}
	case r[0] == 'e':
		if e := jwtEnd(r); e > 0 {
			return st + e, kindJWT
		}
	case r[0] == 'A':
		if (strings.HasPrefix(r, "AKIA") || strings.HasPrefix(r, "ASIA")) && n >= 20 &&
			run(r, 4, cUpper|cDigit) >= 20 && (n == 20 || !isAlnum(r[20])) {
			return st + 20, kindAWSKeyID
		}
		if strings.HasPrefix(r, "AIza") { // Google API keys: 35 of [0-9A-Za-z_-]
			if e := run(r, 4, cB64url); e-4 >= 35 {
				return st + e, kindGoogleAPIKey
			}
		}
	}
	return 0, ""
}

// jwtEnd matches header.payload.signature where header and payload are
// base64url JSON objects (both start "eyJ", the encoding of `{"`).
func jwtEnd(r string) int {
	if !strings.HasPrefix(r, "eyJ") {
		return 0
	}
	h := run(r, 3, cB64url)
	if h < 10 || h+4 > len(r) || r[h] != '.' || !strings.HasPrefix(r[h+1:], "eyJ") {
		return 0
	}
	p := run(r, h+4, cB64url)
	if p-h-1 < 10 || p >= len(r) || r[p] != '.' {
		return 0
	}
	return run(r, p+1, cB64url)
}

// refine names a whole value found by context when its shape says more: a
// GitHub token under "password" is reported as github_token. tokenCtx says
// the context is a token slot, where 40 hex characters are a Gitea/Forgejo
// token rather than a commit SHA.
func refine(v string, tokenCtx bool) string {
	if v == "" {
		return ""
	}
	if strings.HasPrefix(v, "-----BEGIN ") && strings.Contains(v, "PRIVATE KEY") {
		return kindPEM
	}
	if e, kind := tokenAt(v, 0); e == len(v) {
		return kind
	}
	if tokenCtx && len(v) == 40 && run(v, 0, cHex) == 40 {
		return kindGitea
	}
	return ""
}

// authSplit returns where the credential starts in an Authorization value
// ("Bearer x", "token x", "Basic x") and whether it is a token slot.
func authSplit(v string) (int, bool) {
	w := strings.IndexAny(v, " \t")
	if w < 0 {
		return 0, true
	}
	scheme, ok := authScheme(v[:w])
	if !ok {
		return 0, true
	}
	for w < len(v) && (v[w] == ' ' || v[w] == '\t') {
		w++
	}
	return w, scheme != "basic"
}

func authScheme(w string) (string, bool) {
	for _, s := range [...]string{"bearer", "token", "basic", "digest", "bot", "dpop", "negotiate", "ntlm", "apikey", "aws4-hmac-sha256"} {
		if strings.EqualFold(w, s) {
			return s, true
		}
	}
	return "", false
}

// looksRandom reports a run of letters and digits that is not a word or
// an identifier: it has a digit, or both cases.
func looksRandom(v string) bool {
	return hasClass(v, cDigit) || (hasClass(v, cUpper) && hasClass(v, cLower))
}

// looksCredential is the bar a value must pass when its context is weak
// ("Bearer tokens expire hourly" must survive): long enough, and a digit or
// mixed case as random strings have.
func looksCredential(v string) bool {
	if len(v) < 8 {
		return false
	}
	return hasClass(v, cDigit) || (len(v) >= 16 && hasClass(v, cUpper) && hasClass(v, cLower))
}

// isPlaceholder recognises values that stand for a secret without being one
// ($TOKEN, ${{ secrets.X }}, <token>, ***, null): redacting them hides
// useful instructions and proves nothing.
func isPlaceholder(v string) bool {
	if v == "" || isMarker(v) {
		return true
	}
	switch v[0] {
	case '$':
		return len(v) == 1 || v[1] == '{' || v[1] == '(' || run(v, 1, cAlnum|cUnderscore) == len(v)
	case '<':
		return v[len(v)-1] == '>'
	case '%':
		return len(v) > 2 && v[len(v)-1] == '%' && run(v, 1, cAlnum|cUnderscore) == len(v)-1
	case '{':
		return strings.HasPrefix(v, "{{")
	case '*', 'x', 'X', '.', '#':
		return len(v) >= 3 && strings.Count(v, v[:1]) == len(v)
	}
	if isOwnID(v) {
		return true
	}
	if len(v) <= 9 {
		for _, w := range [...]string{"null", "nil", "none", "true", "false", "undefined", "redacted", "…", "|", ">", "?"} {
			if strings.EqualFold(v, w) {
				return true
			}
		}
	}
	return false
}

// isCodeRef recognises a reference in source code rather than a secret
// value, so pasted code keeps its meaning: a lower-case receiver followed by
// dotted names one of which is exported or upper-case (cfg.Password,
// sess.ID, process.env.TOKEN), or a dotted call (os.Getenv(…)).
func isCodeRef(v string) bool {
	i := run(v, 0, cLower)
	if i == 0 || i > 12 || i == len(v) || v[i] != '.' {
		return false
	}
	exported := false
	for i < len(v) && v[i] == '.' {
		j := run(v, i+1, cAlnum|cUnderscore)
		if j == i+1 {
			return false
		}
		if class[v[i+1]]&cUpper != 0 || strings.IndexByte(v[i+1:j], '_') >= 0 {
			exported = true
		}
		i = j
	}
	if i < len(v) {
		return v[i] == '('
	}
	return exported
}

// isOwnID recognises checkpointd's own identifiers (ids.go: ses_, run_, tok_
// and lease ids), which are references, not secrets, even under a key such
// as session_id.
func isOwnID(v string) bool {
	if len(v) < 20 || len(v) > 44 || v[3] != '_' {
		return false
	}
	switch v[:4] {
	case "ses_", "run_", "tok_", "lse_":
		return run(v, 4, cAlnum) == len(v)
	}
	return false
}

type family uint8

const (
	famNone     family = iota
	famSecret          // password, secret, api_key… anywhere in the name
	famToken           // names ending in token: 40 hex there is a Gitea token
	famAuth            // Authorization, Proxy-Authorization
	famCookie          // Cookie, Set-Cookie
	famAWS             // aws_secret_access_key
	famAzure           // AccountKey, SharedAccessKey: Azure connection strings
	famRegistry        // "auth" of a docker config: only a credential-looking value
)

// fieldKind is the marker kind for a secret key's value: '=' is assignment
// (query strings, forms, env, flags), ':' is structure (JSON, YAML, maps).
func fieldKind(fam family, sep byte) string {
	switch fam {
	case famAuth:
		return kindAuthorization
	case famCookie:
		return kindCookie
	case famAWS:
		return kindAWSSecret
	case famAzure:
		return kindAzure
	case famRegistry:
		return kindRegistryAuth
	}
	if sep == '=' {
		return kindQuerySecret
	}
	return kindSecretField
}

const maxKey = 64

// safeKeys are names that look secret but hold none. They are compared after
// normalisation (lower case, only letters and digits), so fencing_token,
// fencingToken and Fencing-Token are all safe. Documented in
// docs/redaction.md.
var safeKeys = map[string]bool{
	"fencingtoken": true, "idempotencykey": true, // schema v1 keys
	"tokentype": true, "tokencount": true, "maxtokens": true,
	"pagetoken": true, "nextpagetoken": true,
	"secretname": true, "secretref": true, "secretkeyref": true,
}

// safeSuffixes end names that mention a secret without holding one
// (password_file, secret_name, token_url).
var safeSuffixes = []string{
	"file", "path", "dir", "stdin", "env", "name", "url", "uri", "type", "length", "policy", "count", "ref",
}

// classifyKey says whether a key names a secret. query reports a URL query
// or form context, where short names (key=, auth=, sig=) are secrets too.
// It runs for every map key and every "k:"/"k=" in prose, so it normalises
// into a stack buffer and finds the secret words in one pass.
func classifyKey(raw string, query bool) family {
	// A dotted path is judged by its last name: db.password is a secret,
	// run.FencingToken and password.txt are not.
	if i := strings.LastIndexByte(raw, '.'); i >= 0 && i < len(raw)-1 {
		raw = raw[i+1:]
	}
	var buf [96]byte
	n := 0
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		default:
			continue
		}
		if n == len(buf) {
			return famNone
		}
		buf[n] = c
		n++
	}
	k := string(buf[:n]) // does not escape: the compiler keeps it on the stack
	fam := famNone
	switch k {
	case "authorization", "proxyauthorization":
		fam = famAuth
	case "cookie", "setcookie":
		fam = famCookie
	case "awssecretaccesskey", "secretaccesskey", "awssecretkey":
		fam = famAWS
	case "accountkey", "sharedaccesskey", "sharedaccesssignature":
		fam = famAzure
	case "bearer", "jwt":
		fam = famToken
	case "auth":
		// In a query auth= is a secret; in structure it is one when its
		// value looks like one (a docker config's base64 user:password,
		// not "oauth2" or "basic").
		fam = famRegistry
		if query {
			fam = famSecret
		}
	case "key", "sig", "signature", "pass", "pwd":
		if query {
			fam = famSecret
		}
	default:
		if strings.HasSuffix(k, "token") {
			fam = famToken
		} else if hasSecretWord(k) {
			fam = famSecret
			for _, suf := range safeSuffixes {
				if strings.HasSuffix(k, suf) {
					return famNone
				}
			}
		}
	}
	if fam != famNone && safeKeys[k] {
		return famNone
	}
	return fam
}

// hasSecretWord reports whether a normalised key contains password, passwd,
// passphrase, secret, credential, privatekey, apikey, sessionid or sessid.
func hasSecretWord(k string) bool {
	for i := 0; i+6 <= len(k); i++ {
		r := k[i:]
		switch r[0] {
		case 'p':
			if strings.HasPrefix(r, "passw") || strings.HasPrefix(r, "passphrase") || strings.HasPrefix(r, "privatekey") {
				return true
			}
		case 's':
			if strings.HasPrefix(r, "secret") || strings.HasPrefix(r, "sessionid") || strings.HasPrefix(r, "sessid") {
				return true
			}
		case 'c':
			if strings.HasPrefix(r, "credential") {
				return true
			}
		case 'a':
			if strings.HasPrefix(r, "apikey") {
				return true
			}
		}
	}
	return false
}

// identifierLike reports a key that cannot be an English word: it has an
// inner '_' or '-', or a lower-to-upper case change (apiKey).
func identifierLike(k string) bool {
	k = strings.TrimLeft(k, "-_.")
	for i := 1; i < len(k); i++ {
		c := k[i]
		if c == '_' || c == '-' || ('A' <= c && c <= 'Z' && 'a' <= k[i-1] && k[i-1] <= 'z') {
			return true
		}
	}
	return false
}

func hasAnyPrefix(s string, prefixes ...string) int {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return len(p)
		}
	}
	return 0
}
