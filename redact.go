package checkpointd

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// ErrUnredactable wraps ErrInvalidCheckpoint. It reports a value the redactor
// cannot process (invalid UTF-8, a value type it does not know): the write
// must be refused, never stored raw.
var ErrUnredactable = fmt.Errorf("%w: value cannot be redacted", ErrInvalidCheckpoint)

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
)

const markerPrefix = "[REDACTED:"

// maxValue bounds how far a value that runs to a closing quote or the end of
// its line is scanned. Real secrets are far shorter; the bound keeps hostile
// input (thousands of "Cookie: " on one line) from costing quadratic time.
const maxValue = 8 << 10

// RedactString returns s with every secret replaced by "[REDACTED:<kind>]"
// and how many were replaced. Markers already in s are left alone and not
// counted, so redaction is idempotent. A string with nothing to redact is
// returned as is, without allocating.
//
// Errors: ErrUnredactable (which wraps ErrInvalidCheckpoint) when s is not
// valid UTF-8.
func RedactString(s string) (string, int, error) {
	if !utf8.ValidString(s) {
		return "", 0, fmt.Errorf("%w: invalid UTF-8 at byte %d", ErrUnredactable, invalidAt(s))
	}
	out, n := redact(s)
	return out, n, nil
}

// RedactTree redacts every string in a JSON tree as decoded by encoding/json
// with UseNumber (map[string]any, []any, string, json.Number, float64, bool,
// nil) and returns a new tree (the input is not modified) with the number of
// redactions. Every string under a key named like a secret (password, token,
// api_key, authorization, cookie…, at any depth below it) is replaced as a
// whole; other strings are scanned like RedactString. Keys are not redacted.
//
// Errors: ErrUnredactable (which wraps ErrInvalidCheckpoint), naming the JSON
// pointer of the value, for a string or key that is not valid UTF-8 or a
// value of another Go type: failing closed beats storing what was not seen.
func RedactTree(v any) (any, int, error) {
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
			p = strings.ToValidUTF8(e.key, "\uFFFD")
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

type span struct {
	start, end int
	kind       string
}

// scanner finds secrets in one left-to-right pass. Only trigger bytes stop
// it; each trigger runs a cheap check on a small window around it and the
// precise matcher only when that check passes.
type scanner struct {
	s         string
	spans     []span
	last      int  // end of the last span: no match may start before it
	tokenJSON int8 // giteaTokenJSON's answer: 0 not asked yet, 1 no, 2 yes
}

// giteaTokenJSON reports whether s holds Gitea's access token JSON
// ({"id":…,"name":…,"sha1":"<token>","token_last_eight":…}), where a "sha1"
// is the token itself and not a commit. Asked at most once per string.
func (sc *scanner) giteaTokenJSON() bool {
	if sc.tokenJSON == 0 {
		sc.tokenJSON = 1
		if strings.Contains(sc.s, `token_last_eight"`) {
			sc.tokenJSON = 2
		}
	}
	return sc.tokenJSON == 2
}

func (sc *scanner) emit(start, end int, kind string) bool {
	if start < sc.last || end <= start {
		return false
	}
	sc.spans = append(sc.spans, span{start, end, kind})
	sc.last = end
	return true
}

// emitValue emits a context-found value unless it is a placeholder or already
// carries a marker. It reports whether the caller may resume after the value:
// it was emitted, or it is the marker an earlier pass emitted there (so both
// passes skip the same text). Otherwise the caller rescans the value's inside.
func (sc *scanner) emitValue(a, b int, kind string, tokenCtx bool) bool {
	v := sc.s[a:b]
	if isMarkerish(v) {
		return true
	}
	if isPlaceholder(v) || strings.Contains(v, markerPrefix) || (b < len(sc.s) && markerEnd(sc.s, b) > 0) {
		return false
	}
	if k := refine(v, tokenCtx); k != "" {
		kind = k
	}
	return sc.emit(a, b, kind)
}

// boundaryBefore reports whether a token may start at i. The end of the last
// span counts as a boundary because a marker (ending in ']') will stand there.
func (sc *scanner) boundaryBefore(i int) bool {
	return i == 0 || (i == sc.last && i > 0) || !isAlnum(sc.s[i-1])
}

func (sc *scanner) run() {
	s := sc.s
	for i := 0; i < len(s); {
		c := s[i]
		if class[c]&cTrigger == 0 {
			i++
			continue
		}
		next := i + 1
		switch c {
		case '[':
			if e := markerEnd(s, i); e > 0 {
				next = e
			}
		case ':':
			next = sc.colon(i)
		case '=':
			next = sc.equals(i)
		case '-':
			next = sc.dash(i)
		case '_':
			next = sc.prefixed(i, 3, 6) // gh?_ , github_pat_ (and cpd_)
		case 'J':
			next = sc.prefixed(i, 2, 2) // eyJ
		case 'A':
			next = sc.prefixed(i, 0, 0) // AKIA, ASIA
		case 'B', 'b':
			next = sc.bearer(i)
		}
		i = max(next, i+1)
	}
}

// prefixed tries a prefixed token starting back1 or back2 bytes before the
// trigger at i.
func (sc *scanner) prefixed(i, back1, back2 int) int {
	for k, back := range [2]int{back1, back2} {
		st := i - back
		if k == 1 && back2 == back1 {
			break
		}
		if st < 0 || st < sc.last || !sc.boundaryBefore(st) {
			continue
		}
		if e, kind := tokenAt(sc.s, st); e > 0 && sc.emit(st, e, kind) {
			return e
		}
	}
	return i + 1
}

func (sc *scanner) dash(i int) int {
	s := sc.s
	if strings.HasPrefix(s[i:], "-----BEGIN ") {
		return sc.pem(i)
	}
	if i == 0 || isSpace(s[i-1]) || isQuote(s[i-1]) {
		if strings.HasPrefix(s[i:], "-u ") || strings.HasPrefix(s[i:], "--user ") {
			return sc.userFlag(i)
		}
		if i+1 < len(s) && s[i+1] == '-' {
			return sc.flag(i)
		}
	}
	// sk-, xoxb- xapp- gldt- glrt-, glpat- glptt-
	if e := sc.prefixed(i, 2, 4); e > i+1 {
		return e
	}
	return sc.prefixed(i, 5, 5)
}

// pem redacts a whole private key block; a block without its END line runs
// to the end of the string, because a truncated key is still a key.
func (sc *scanner) pem(i int) int {
	s := sc.s
	lab := i + len("-----BEGIN ")
	e := strings.Index(s[lab:min(len(s), lab+64)], "-----")
	if e < 0 {
		return lab
	}
	label := s[lab : lab+e]
	if !strings.Contains(label, "PRIVATE KEY") {
		return lab + e + 5
	}
	end := len(s)
	for from := lab + e + 5; ; {
		j := strings.Index(s[from:], "-----END ")
		if j < 0 {
			break
		}
		j += from + len("-----END ")
		if strings.HasPrefix(s[j:], label) && strings.HasPrefix(s[j+len(label):], "-----") {
			end = j + len(label) + 5
			break
		}
		from = j
	}
	if sc.emit(i, end, kindPEM) {
		return end
	}
	return lab
}

// url redacts the password of scheme://user:pass@host, or a user that is
// itself a token (https://<token>@host). Scheme, user and host stay.
func (sc *scanner) url(i int) int {
	s := sc.s
	a := i + 3
	if i == 0 || !isAlnum(s[i-1]) {
		return a
	}
	k := a
	for k < len(s) && class[s[k]]&cAuthorityStop == 0 {
		k++
	}
	at := strings.LastIndexByte(s[a:k], '@')
	if at < 0 {
		return a
	}
	at += a
	ui := s[a:at]
	if c := colonOutsideMarkers(ui); c >= 0 {
		sc.emitUser(a, a+c) // https://ghp_…:x-oauth-basic@github.com
		if sc.emitValue(a+c+1, at, kindURLUserinfo, true) {
			return at + 1
		}
		return a
	}
	if sc.emitUser(a, at) {
		return at + 1
	}
	return a
}

// emitUser redacts a user name that is itself a token: the scan jumps past
// it to the password, so the token detectors would not see it.
func (sc *scanner) emitUser(a, b int) bool {
	if kind := refine(sc.s[a:b], true); kind != "" {
		return sc.emit(a, b, kind)
	}
	return false
}

func (sc *scanner) bearer(i int) int {
	s := sc.s
	if i+7 > len(s) || s[i+1]|0x20 != 'e' || !strings.EqualFold(s[i:i+6], "bearer") || !sc.boundaryBefore(i) {
		return i + 1
	}
	j := i + 6
	if s[j] != ' ' && s[j] != '\t' {
		return j
	}
	for j < len(s) && (s[j] == ' ' || s[j] == '\t') {
		j++
	}
	// token68: '=' only as trailing padding, so "bearer expires_in=3600"
	// (a value, then an assignment) is not a credential.
	e := run(s, j, cToken68)
	for e < len(s) && s[e] == '=' {
		e++
	}
	if e < len(s) && class[s[e]]&cToken68 != 0 {
		return j
	}
	for e > j && s[e-1] == '.' { // the end of a sentence, not of the token
		e--
	}
	cred := s[j:e]
	if refine(cred, true) == "" && !looksCredential(cred) {
		return j
	}
	if sc.emitValue(j, e, kindBearer, true) {
		return e
	}
	return j
}

// flag handles "--token VALUE" style command-line flags; "--token=VALUE" is
// left to equals.
func (sc *scanner) flag(i int) int {
	s := sc.s
	e := i + 2
	for e < len(s) && class[s[e]]&cKey != 0 && e-i < maxKey {
		e++
	}
	if e == i+2 || e >= len(s) || s[e] != ' ' {
		return e
	}
	fam := classifyKey(s[i+2:e], false)
	if fam == famNone {
		return e
	}
	v := e
	for v < len(s) && s[v] == ' ' {
		v++
	}
	if v >= len(s) || s[v] == '-' {
		return v
	}
	return sc.value(v, '=', fam, false)
}

// userFlag handles curl's -u/--user user:password: the password goes, as in
// URL user-info.
func (sc *scanner) userFlag(i int) int {
	s := sc.s
	v := i + strings.IndexByte(s[i:], ' ')
	for v < len(s) && s[v] == ' ' {
		v++
	}
	if v >= len(s) {
		return v
	}
	a, b, end, ok := quotedAt(s, v)
	if !ok {
		a, b = v, v
		for b < len(s) && !isSpace(s[b]) && !isQuote(s[b]) {
			b++
		}
		end = b
	}
	c := colonOutsideMarkers(s[a:b])
	if c >= 0 {
		sc.emitUser(a, a+c)
	}
	if c < 0 || !sc.emitValue(a+c+1, b, kindURLUserinfo, true) {
		return a
	}
	return end
}

func (sc *scanner) colon(i int) int {
	s := sc.s
	if strings.HasPrefix(s[i:], "://") {
		return sc.url(i)
	}
	if i+1 < len(s) && s[i+1] == '=' { // Go's :=
		return i + 2
	}
	k, ok := sc.keyBefore(i, false)
	if !ok {
		return i + 1
	}
	fam := classifyKey(s[k.start:k.end], false)
	if fam == famNone && k.quoted && s[k.start:k.end] == "sha1" && sc.giteaTokenJSON() {
		fam = famToken // Gitea's access token JSON carries the token as "sha1"
	}
	if fam == famNone {
		return i + 1
	}
	// An unquoted plain word before a colon is often prose ("rotate the
	// token: it expired"); it counts only at the start of a line or after
	// structural punctuation. Identifiers (api_key, X-Api-Key, apiKey) and
	// header names are distinctive enough anywhere.
	lineStart, punct := sc.startContext(k.start)
	strong := k.quoted || lineStart || punct
	if !strong && fam != famAuth && fam != famCookie && !identifierLike(s[k.start:k.end]) {
		return i + 1
	}
	v := i + 1
	for v < len(s) && (s[v] == ' ' || s[v] == '\t') {
		v++
	}
	if v >= len(s) || s[v] == '\n' || s[v] == '\r' {
		return v
	}
	if !k.quoted && v == i+1 && isQuote(s[v]) {
		return v // "password:" in quotes: the quote closes the string
	}
	switch fam {
	case famAuth:
		return sc.authValue(v, strong)
	case famCookie:
		return sc.cookieValue(v, strong)
	}
	return sc.value(v, ':', fam, !k.quoted && lineStart)
}

func (sc *scanner) equals(i int) int {
	s := sc.s
	if i+1 < len(s) && s[i+1] == '=' {
		return i + 2
	}
	if i > 0 && strings.IndexByte("!<>=:", s[i-1]) >= 0 {
		return i + 1
	}
	k, ok := sc.keyBefore(i, true)
	if !ok {
		return i + 1
	}
	query := !k.quoted && k.start > 0 && strings.IndexByte("?&;", s[k.start-1]) >= 0
	fam := classifyKey(s[k.start:k.end], query)
	if fam == famNone {
		return i + 1
	}
	v := i + 1
	for v < len(s) && (s[v] == ' ' || s[v] == '\t') {
		v++
	}
	if v >= len(s) {
		return v
	}
	if fam == famAuth {
		return sc.authValue(v, true)
	}
	return sc.value(v, '=', fam, false)
}

// value redacts the value of a secret key at v: a quoted string, a nested
// {…} or […] block (after ':'), the rest of the line (YAML at line start) or
// a run up to a separator.
func (sc *scanner) value(v int, sep byte, fam family, toEOL bool) int {
	s := sc.s
	kind, tokenCtx := fieldKind(fam, sep), fam == famToken
	if a, b, end, ok := quotedAt(s, v); ok {
		if sc.emitValue(a, b, kind, tokenCtx) {
			return end
		}
		return a
	}
	if sep == ':' && (s[v] == '{' || s[v] == '[') {
		if markerEnd(s, v) > 0 {
			return v
		}
		end := blockEnd(s, v)
		if end-v > 2 { // {} and [] hide nothing
			sc.emit(v, end, kind)
		}
		return end
	}
	var e int
	if toEOL {
		e = lineEnd(s, v)
	} else {
		stop := cStopEq
		if sep == ':' {
			stop = cStopColon
		}
		e = v
		for e < len(s) && class[s[e]]&stop == 0 {
			e++
		}
	}
	if isCodeRef(s[v:e]) {
		return v
	}
	if sc.emitValue(v, e, kind, tokenCtx) {
		return e
	}
	return v
}

func (sc *scanner) authValue(v int, strong bool) int {
	s := sc.s
	if a, b, end, ok := quotedAt(s, v); ok {
		off, tokenCtx := authSplit(s[a:b])
		if sc.emitValue(a+off, b, kindAuthorization, tokenCtx) {
			return end
		}
		return a
	}
	w := v
	for w < len(s) && class[s[w]]&cStopAuth == 0 {
		w++
	}
	c, e, tokenCtx := v, w, true
	if scheme, ok := authScheme(s[v:w]); ok && w < len(s) && (s[w] == ' ' || s[w] == '\t') {
		c = w
		for c < len(s) && (s[c] == ' ' || s[c] == '\t') {
			c++
		}
		e = c
		if scheme == "digest" || scheme == "aws4-hmac-sha256" { // credentials with spaces
			e = lineEnd(s, c)
		} else {
			for e < len(s) && class[s[e]]&cStopAuth == 0 {
				e++
			}
		}
		tokenCtx = scheme != "basic"
	} else {
		strong = false // a lone word is a credential only if it looks like one
	}
	if !strong && refine(s[c:e], tokenCtx) == "" && !looksCredential(s[c:e]) {
		return c
	}
	if sc.emitValue(c, e, kindAuthorization, tokenCtx) {
		return e
	}
	return c
}

func (sc *scanner) cookieValue(v int, strong bool) int {
	s := sc.s
	if a, b, end, ok := quotedAt(s, v); ok {
		if sc.emitValue(a, b, kindCookie, false) {
			return end
		}
		return a
	}
	if n := run(s, v, cKey); !strong && (n == v || n == len(s) || s[n] != '=') {
		return v // weak context: must start like a cookie pair (name=)
	}
	e := v
	for e < len(s) && e-v < maxValue && s[e] != '\n' && s[e] != '\r' && !isQuote(s[e]) {
		e++
	}
	for e > v && (s[e-1] == ' ' || s[e-1] == '\t') {
		e--
	}
	if sc.emitValue(v, e, kindCookie, false) {
		return e
	}
	return v
}

type keyRef struct {
	start, end int
	quoted     bool
}

// keyBefore finds the key ending just before the separator at sep: a run of
// key characters, optionally quoted ("k", 'k', \"k\"). It never looks back
// past the last span, so a second pass sees the same keys as the first.
func (sc *scanner) keyBefore(sep int, spaces bool) (keyRef, bool) {
	s := sc.s
	j := sep
	for j > sc.last && (s[j-1] == ' ' || s[j-1] == '\t') {
		j--
	}
	var q string
	if j > sc.last && (s[j-1] == '"' || s[j-1] == '\'') {
		q = s[j-1 : j]
		j--
		if q == `"` && j > sc.last && s[j-1] == '\\' {
			q = `\"`
			j--
		}
	} else if j != sep && !spaces {
		return keyRef{}, false
	}
	end := j
	for j > sc.last && class[s[j-1]]&cKey != 0 {
		j--
		if end-j > maxKey {
			return keyRef{}, false
		}
	}
	if j == end {
		return keyRef{}, false
	}
	if q != "" && (j-len(q) < sc.last || s[j-len(q):j] != q) {
		return keyRef{}, false
	}
	return keyRef{start: j, end: end, quoted: q != ""}, true
}

// startContext reports whether the key at i opens a line (after indentation
// or a list/comment/quote marker) or follows structural punctuation.
func (sc *scanner) startContext(i int) (lineStart, punct bool) {
	s := sc.s
	j := i
	for j > 0 && j > sc.last && strings.IndexByte(" \t-*#>|.)0123456789", s[j-1]) >= 0 {
		j--
	}
	if j == 0 {
		return true, false
	}
	if j == sc.last {
		return false, false
	}
	switch s[j-1] {
	case '\n', '\r':
		return true, false
	case '{', ',', ';', '(', '[', '"', '\'', '`':
		return false, true
	}
	return false, false
}

// quotedAt parses a quoted string starting at v ("…", '…' or \"…\" as in
// JSON pasted inside JSON). content is s[a:b]; end is just past the closing
// quote. An unterminated string runs to the end of the line.
func quotedAt(s string, v int) (a, b, end int, ok bool) {
	switch {
	case s[v] == '"' || s[v] == '\'':
		q := s[v]
		for k := v + 1; k < len(s); k++ {
			if k-v > maxValue {
				return v + 1, k, k, true
			}
			switch s[k] {
			case '\\':
				k++
			case q:
				return v + 1, k, k + 1, true
			case '\n':
				return v + 1, k, k, true
			}
		}
		return v + 1, len(s), len(s), true
	case s[v] == '\\' && v+1 < len(s) && s[v+1] == '"':
		if k := strings.Index(s[v+2:min(len(s), v+2+maxValue)], `\"`); k >= 0 {
			return v + 2, v + 2 + k, v + 4 + k, true
		}
		e := lineEnd(s, v+2)
		return v + 2, e, e, true
	}
	return 0, 0, 0, false
}

// blockEnd returns the end of the balanced {…} or […] at v, or len(s).
func blockEnd(s string, v int) int {
	depth := 0
	for k := v; k < len(s); k++ {
		switch s[k] {
		case '{', '[':
			depth++
		case '}', ']':
			if depth--; depth == 0 {
				return k + 1
			}
		case '"':
			for k++; k < len(s) && s[k] != '"'; k++ {
				if s[k] == '\\' {
					k++
				}
			}
		}
	}
	return len(s)
}

// lineEnd returns the end of the line at v without trailing blanks.
func lineEnd(s string, v int) int {
	e := v
	for e < len(s) && e-v < maxValue && s[e] != '\n' && s[e] != '\r' {
		e++
	}
	for e > v && (s[e-1] == ' ' || s[e-1] == '\t') {
		e--
	}
	return e
}

// markerEnd returns the end of a "[REDACTED:kind]" marker at i, or 0.
func markerEnd(s string, i int) int {
	if !strings.HasPrefix(s[i:], markerPrefix) {
		return 0
	}
	for k := i + len(markerPrefix); k < len(s) && k < i+len(markerPrefix)+33; k++ {
		switch c := s[k]; {
		case c == ']':
			if k > i+len(markerPrefix) {
				return k + 1
			}
			return 0
		case c != '_' && (c < 'a' || c > 'z'):
			return 0
		}
	}
	return 0
}

// colonOutsideMarkers finds the user:password separator, skipping the ':'
// inside a marker that already replaced the user.
func colonOutsideMarkers(s string) int {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ':':
			return i
		case '[':
			if e := markerEnd(s, i); e > 0 {
				i = e - 1
			}
		}
	}
	return -1
}

// isMarkerish reports a marker, also one whose ']' a value's separators cut
// off.
func isMarkerish(v string) bool {
	if !strings.HasPrefix(v, markerPrefix) {
		return false
	}
	k := run(v, len(markerPrefix), cLower|cUnderscore)
	return k > len(markerPrefix) && (k == len(v) || (k == len(v)-1 && v[k] == ']'))
}

func isMarker(s string) bool { return s != "" && markerEnd(s, 0) == len(s) }

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
		if r[1] == 'o' && r[2] == 'x' && r[4] == '-' && strings.IndexByte("abposr", r[3]) >= 0 {
			p = 5
		} else if strings.HasPrefix(r, "xapp-") {
			p = 5
		}
		if p > 0 {
			if e := run(r, p, cAlnum|cDash); e-p >= 10 && hasClass(r[p:e], cDigit) {
				return st + e, kindSlack
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
	famNone   family = iota
	famSecret        // password, secret, api_key… anywhere in the name
	famToken         // names ending in token: 40 hex there is a Gitea token
	famAuth          // Authorization, Proxy-Authorization
	famCookie        // Cookie, Set-Cookie
	famAWS           // aws_secret_access_key
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
	case "bearer", "jwt":
		fam = famToken
	case "key", "auth", "sig", "signature", "pass", "pwd":
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

// run returns the end of the run of bytes of class c in s starting at i.
func run(s string, i int, c uint16) int {
	for i < len(s) && class[s[i]]&c != 0 {
		i++
	}
	return i
}

func hasClass(s string, c uint16) bool {
	for i := 0; i < len(s); i++ {
		if class[s[i]]&c != 0 {
			return true
		}
	}
	return false
}

func isAlnum(c byte) bool { return class[c]&cAlnum != 0 }
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
func isQuote(c byte) bool { return c == '"' || c == '\'' || c == '`' }

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

// Byte classes, one table lookup per byte in the hot loop.
const (
	cUpper uint16 = 1 << iota
	cLower
	cDigit
	cDash
	cUnderscore
	cHex
	cKey           // key names: [A-Za-z0-9_.-]
	cB64url        // [A-Za-z0-9_-]
	cToken68       // RFC 7235 token68 without its '=' padding: [A-Za-z0-9-._~+/]
	cTrigger       // bytes where a detector may start
	cStopEq        // ends an unquoted value after '='
	cStopColon     // ends an unquoted value after ':'
	cStopAuth      // ends an Authorization scheme or credential
	cAuthorityStop // ends the authority of a URL
	cAlpha         = cUpper | cLower
	cAlnum         = cAlpha | cDigit
)

var class = func() (t [256]uint16) {
	set := func(chars string, c uint16) {
		for i := 0; i < len(chars); i++ {
			t[chars[i]] |= c
		}
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] |= cUpper | cKey | cB64url | cToken68
		t[c+'a'-'A'] |= cLower | cKey | cB64url | cToken68
	}
	for c := '0'; c <= '9'; c++ {
		t[c] |= cDigit | cHex | cKey | cB64url | cToken68
	}
	set("abcdefABCDEF", cHex)
	set("-", cDash|cKey|cB64url|cToken68)
	set("_", cUnderscore|cKey|cB64url|cToken68)
	set(".", cKey|cToken68)
	set("~+/", cToken68)
	set("[:=-_JABb", cTrigger)
	const blank = " \t\r\n\f\v"
	set(blank+"\"'`&,;)]}<>", cStopEq)
	set(blank+"\"'`,)]}", cStopColon)
	set(blank+"\"'`,;", cStopAuth)
	set(blank+"\"'`/?#<>\\", cAuthorityStop)
	return t
}()
