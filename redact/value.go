// Redaction values: where a secret value starts and ends, the key before it, and markers.

package redact

import "strings"

// maxValue bounds how far a value that runs to a closing quote or the end of
// its line is scanned. Real secrets are far shorter; the bound keeps hostile
// input (thousands of "Cookie: " on one line) from costing quadratic time.
const maxValue = 8 << 10

// value redacts the value of a secret key at v: a quoted string, a nested
// {…} or […] block (after ':'), the rest of the line (YAML at line start) or
// a run up to a separator.
func (sc *scanner) value(v int, sep byte, fam family, toEOL bool) int {
	s := sc.s
	kind, tokenCtx := fieldKind(fam, sep), fam == famToken
	if a, b, end, ok := quotedAt(s, v); ok {
		if fam == famRegistry && !looksCredential(s[a:b]) {
			return a
		}
		if sc.emitValue(a, b, kind, tokenCtx) {
			return end
		}
		return a
	}
	if fam == famRegistry && (s[v] == '{' || s[v] == '[') {
		return v // a subtree under "auth" is scanned as any text
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
		for e < len(s) && e-v < maxValue && class[s[e]]&stop == 0 {
			e++
		}
	}
	if isCodeRef(s[v:e]) || (fam == famRegistry && !looksCredential(s[v:e])) {
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
