// Redaction of percent-encoded text: a URL pasted as a query value
// (next=https%3A%2F%2Fbob%3Apw%40host) and encoded key=value pairs
// (%3Faccess_token%3Dx%26state%3D1), in either case of the hex digits.

package redact

import "strings"

// percent runs at a '%': "%3A" may start an encoded "://", "%3D" is an
// encoded '='. Anything else is cheap to pass.
func (sc *scanner) percent(i int) int {
	s := sc.s
	if i+2 >= len(s) || s[i+1] != '3' {
		return i + 1
	}
	switch s[i+2] | 0x20 {
	case 'a':
		return sc.encodedURL(i)
	case 'd':
		return sc.encodedEquals(i)
	}
	return i + 1
}

// isEscape reports the escape %<hex> at s[i:], in either case (hex is
// given in upper case).
func isEscape(s string, i int, hex string) bool {
	return i+2 < len(s) && s[i] == '%' && upper(s[i+1]) == hex[0] && upper(s[i+2]) == hex[1]
}

func upper(c byte) byte {
	if 'a' <= c && c <= 'z' {
		return c - ('a' - 'A')
	}
	return c
}

// encodedURL handles scheme%3A%2F%2F (or scheme%3A//, Python's quote()
// keeps '/') followed by user%3Apassword%40host: the password goes, as in
// url.
func (sc *scanner) encodedURL(i int) int {
	s := sc.s
	a := i + 3
	switch {
	case strings.HasPrefix(s[a:], "//"):
		a += 2
	case isEscape(s, a, "2F") && isEscape(s, a+3, "2F"):
		a += 6
	default:
		return i + 3
	}
	if i == 0 || !isAlnum(s[i-1]) {
		return a
	}
	// The authority ends where an unencoded one would, at an encoded '/',
	// '?' or '#', or at a raw '&' (the end of the query value holding it).
	k := a
	at, atLen := -1, 0
	for ; k < len(s) && k-a < maxValue; k++ {
		c := s[k]
		if class[c]&cAuthorityStop != 0 || c == '&' {
			break
		}
		if c == '%' && (isEscape(s, k, "2F") || isEscape(s, k, "3F") || isEscape(s, k, "23")) {
			break
		}
		if c == '@' {
			at, atLen = k, 1
		} else if isEscape(s, k, "40") {
			at, atLen = k, 3
		}
	}
	if at < 0 {
		return a
	}
	return sc.userinfo(a, at, atLen, true)
}

// userinfo redacts the password of the user-info s[a:at] (or its user when
// that is itself a token: https://<token>@host) and returns where to
// resume; atLen is the length of its '@' ("%40" when encoded).
func (sc *scanner) userinfo(a, at, atLen int, encoded bool) int {
	ui := sc.s[a:at]
	c, cl := colonOutsideMarkers(ui), 1
	if encoded {
		c, cl = encodedColon(ui)
	}
	if c >= 0 {
		sc.emitUser(a, a+c) // https://ghp_…:x-oauth-basic@github.com
		if sc.emitValue(a+c+cl, at, kindURLUserinfo, true) {
			return at + atLen
		}
		return a
	}
	if sc.emitUser(a, at) {
		return at + atLen
	}
	return a
}

// encodedColon finds the user:password separator of encoded user-info, ':'
// or "%3A", outside markers; it returns its index and length.
func encodedColon(s string) (int, int) {
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == ':':
			return i, 1
		case isEscape(s, i, "3A"):
			return i, 3
		case s[i] == '[':
			if e := markerEnd(s, i); e > 0 {
				i = e - 1
			}
		}
	}
	return -1, 0
}

// encodedEquals handles key%3Dvalue: the value of a secret-named key goes
// up to an encoded '&' or '#' (%26, %23), or where an unencoded value ends.
func (sc *scanner) encodedEquals(i int) int {
	s := sc.s
	k, ok := sc.keyBefore(i, false)
	if !ok || k.quoted {
		return i + 3
	}
	k, query := queryKey(s, k)
	fam := classifyKey(s[k.start:k.end], query)
	if fam == famNone {
		return i + 3
	}
	v := i + 3
	e := v
	for e < len(s) && e-v < maxValue && class[s[e]]&cStopEq == 0 && !isEscape(s, e, "26") && !isEscape(s, e, "23") {
		e++
	}
	if sc.emitValue(v, e, fieldKind(fam, '='), fam == famToken) {
		return e
	}
	return v
}

// queryKey strips a percent escape glued to the front of a key ("%26token"
// is "&token") and reports whether the key opens a pair of a query or form:
// it follows '?', '&' or ';', raw or encoded (%3F, %26, %3B).
func queryKey(s string, k keyRef) (keyRef, bool) {
	if k.quoted {
		return k, false
	}
	st := k.start
	if st > 0 && s[st-1] == '%' && k.end-st > 2 && class[s[st]]&cHex != 0 && class[s[st+1]]&cHex != 0 {
		k.start += 2
		return k, isEscape(s, st-1, "26") || isEscape(s, st-1, "3F") || isEscape(s, st-1, "3B")
	}
	return k, st > 0 && strings.IndexByte("?&;", s[st-1]) >= 0
}
