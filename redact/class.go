// Redaction byte classes: the 256-entry class table and the helpers that read it.

package redact

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
	cCommandStop   // ends a shell command: a line break or ; | & ( `
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
	set("[:=-_JABSb %", cTrigger)
	const blank = " \t\r\n\f\v"
	set(blank+"\"'`&,;)]}<>", cStopEq)
	set(blank+"\"'`,)]}", cStopColon)
	set(blank+"\"'`,;", cStopAuth)
	set(blank+"\"'`/?#<>\\", cAuthorityStop)
	set("\n\r;|&(`", cCommandStop)
	return t
}()

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
