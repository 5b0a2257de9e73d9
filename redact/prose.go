// Redaction in running text: a secret name, a link word and a value that
// looks like a credential ("the db password: X", "GITEA_TOKEN is X").

package redact

import "strings"

// In prose a secret name is often followed by ordinary English ("the
// password reset flow", "the token: it expired"), so a value found there is
// redacted only when it looks like a credential (looksCredential), and an
// all-hex value only when the name says which token it is (proseName):
// "the commit that rotated the token: a4c123b…" keeps its SHA.

// link handles "<name> is|was|to <value>" where i is the space before the
// link word: "the admin password is X", "set GITEA_TOKEN to X", "the root
// password was reset to X".
func (sc *scanner) link(i int) int {
	s := sc.s
	v := 0
	switch {
	case strings.HasPrefix(s[i+1:], "is "):
		v = i + 4
	case strings.HasPrefix(s[i+1:], "was "):
		v = i + 5
	case strings.HasPrefix(s[i+1:], "to "):
		v = i + 4
	default:
		return i + 1
	}
	fam, hexOK, ok := sc.proseName(i)
	if !ok {
		return i + 1
	}
	if s[i+1] != 't' {
		if v, ok = skipFillers(s, v); !ok {
			return i + 1
		}
	}
	if next, ok := sc.proseValue(v, fam, hexOK); ok {
		return next
	}
	return i + 1
}

// skipFillers skips what may stand between "is"/"was" and the value: "now"
// or "still", or a verb with "to" ("was reset to", "is set to"). A verb
// without "to" ("was reset on Monday") has no value.
func skipFillers(s string, v int) (int, bool) {
	for _, w := range [...]string{"now ", "still "} {
		if strings.HasPrefix(s[v:], w) {
			return v + len(w), true
		}
	}
	for _, w := range [...]string{"set ", "changed ", "reset ", "updated ", "rotated "} {
		if strings.HasPrefix(s[v:], w) {
			if strings.HasPrefix(s[v+len(w):], "to ") {
				return v + len(w) + 3, true
			}
			return v, false
		}
	}
	return v, true
}

// proseName judges the word ending at end as the name of a secret in
// running text. hexOK says the name picks out a token, so that a 40-hex
// value is a Gitea token and not a commit: an identifier ending in token
// (GITEA_TOKEN, access_token, giteaToken) or the word token after gitea,
// forgejo, access, api, oauth or deploy. "api key" and "private key" count
// as names although "key" alone does not.
func (sc *scanner) proseName(end int) (fam family, hexOK, ok bool) {
	s := sc.s
	j := end
	for j > sc.last && class[s[j-1]]&cKey != 0 {
		if j--; end-j > maxKey {
			return famNone, false, false
		}
	}
	if j == end || (j > 0 && strings.IndexByte("$%{@", s[j-1]) >= 0) {
		return famNone, false, false // "$GITEA_TOKEN is empty" names a variable
	}
	name := s[j:end]
	fam = classifyKey(name, false)
	if fam == famNone && strings.EqualFold(name, "key") {
		if p := sc.wordBefore(j); strings.EqualFold(p, "api") || strings.EqualFold(p, "private") {
			fam = famSecret
		}
	}
	switch fam {
	case famNone, famAuth, famCookie: // the last two have their own header rules
		return famNone, false, false
	case famToken:
		hexOK = identifierLike(name)
		if !hexOK && strings.EqualFold(name, "token") {
			switch strings.ToLower(sc.wordBefore(j)) {
			case "gitea", "forgejo", "access", "api", "oauth", "deploy":
				hexOK = true
			}
		}
	}
	return fam, hexOK, true
}

// wordBefore returns the word of letters before the single blank before i.
func (sc *scanner) wordBefore(i int) string {
	s := sc.s
	if i < 2 || i-1 <= sc.last || s[i-1] != ' ' {
		return ""
	}
	e := i - 1
	j := e
	for j > sc.last && e-j < 16 && class[s[j-1]]&cAlpha != 0 {
		j--
	}
	return s[j:e]
}

// proseValue redacts the word at v after a secret name in running text if
// it looks like a credential, and reports whether it did (or found the
// marker of an earlier pass there) and where to resume.
func (sc *scanner) proseValue(v int, fam family, hexOK bool) (int, bool) {
	s := sc.s
	if v >= len(s) {
		return v, false
	}
	a, b, end, quoted := quotedAt(s, v)
	if !quoted {
		e := v
		for e < len(s) && e-v < maxValue && class[s[e]]&cStopColon == 0 {
			e++
		}
		end = e
		for e > v && strings.IndexByte(".,;:!?", s[e-1]) >= 0 { // the end of the sentence
			e--
		}
		a, b = v, e
	}
	val := s[a:b]
	if isMarkerish(val) {
		return end, true
	}
	if refine(val, hexOK) == "" {
		if !looksCredential(val) || isCodeRef(val) || looksLocation(val) || (!hexOK && isHexID(val)) {
			return v, false
		}
	}
	if sc.emitValue(a, b, fieldKind(fam, ':'), hexOK) {
		return end, true
	}
	return v, false
}

// isHexID reports a commit id, whole or abbreviated (git shows 7 or more
// hex digits): all hex, with a letter (an all-digit value is more likely a
// PIN or a password than a SHA).
func isHexID(v string) bool {
	if len(v) < 7 || len(v) > 64 || run(v, 0, cHex) != len(v) {
		return false
	}
	for i := 0; i < len(v); i++ {
		if class[v[i]]&cAlpha != 0 {
			return true
		}
	}
	return false
}

// looksLocation reports a path or a URL: "copy the secret to
// /run/secrets/db2" moves a secret, it does not show one.
func looksLocation(v string) bool {
	return v[0] == '/' || v[0] == '~' || strings.HasPrefix(v, "./") || strings.HasPrefix(v, "../") ||
		strings.Contains(v, "://")
}

// underscore handles the tokens found at an '_' (gh?_, github_pat_, npm_,
// hf_, cpd_) and a snake_case secret name followed by a blank and its
// value, as in "aws configure set aws_secret_access_key X" or
// "GITEA_TOKEN 3f1c…". It runs at the last '_' of the name only.
func (sc *scanner) underscore(i int) int {
	if e := sc.prefixed(i, 2, 3, 5, 6); e > i+1 { // sk_ rk_, hf_ dop_, whsec_, ghp_… at 3, github_pat_ at 6
		return e
	}
	s := sc.s
	e := i + 1
	for e < len(s) && class[s[e]]&cKey != 0 {
		if s[e] == '_' || e-i > maxKey {
			return i + 1
		}
		e++
	}
	if e+1 >= len(s) || (s[e] != ' ' && s[e] != '\t') {
		return i + 1
	}
	fam, _, ok := sc.proseName(e)
	if !ok {
		return e
	}
	v := e
	for v < len(s) && (s[v] == ' ' || s[v] == '\t') {
		v++
	}
	if v >= len(s) || s[v] == '=' || s[v] == ':' {
		return e // an assignment: equals and colon decide
	}
	if next, ok := sc.proseValue(v, fam, fam == famToken); ok {
		return next
	}
	return e // the blank may still start a link ("GITEA_TOKEN is X")
}
