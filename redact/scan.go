// Redaction scanner: the single left-to-right pass and its trigger-byte detectors.

package redact

import "strings"

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
			next = sc.underscore(i)
		case 'J':
			next = sc.prefixed(i, 2) // eyJ
		case 'A', 'S':
			next = sc.prefixed(i, 0) // AKIA, ASIA, AIza; SG., SK
		case 'B', 'b':
			next = sc.bearer(i)
		case ' ':
			if i+3 < len(s) && (s[i+1] == 'i' && s[i+2] == 's' || s[i+1] == 'w' && s[i+2] == 'a' || s[i+1] == 't' && s[i+2] == 'o') {
				next = sc.link(i) // "… password is X", "set GITEA_TOKEN to X"
			}
		case '%':
			next = sc.percent(i)
		}
		i = max(next, i+1)
	}
}

// prefixed tries a prefixed token starting each of backs bytes before the
// trigger at i, in order.
func (sc *scanner) prefixed(i int, backs ...int) int {
	for _, back := range backs {
		st := i - back
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
		if i+1 < len(s) && (s[i+1] == 'p' || s[i+1] == 'a' || s[i+1] == 'w') {
			if e := sc.shortFlag(i); e > i+1 {
				return e
			}
		}
	}
	// sk-, xoxe.xoxp- (whole), xoxb- xapp- gldt- glrt-, glpat- glptt-
	return sc.prefixed(i, 2, 9, 4, 5)
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
	if strings.EqualFold(s[a:k], "hooks.slack.com") && strings.HasPrefix(s[k:], "/services/") {
		return sc.slackWebhook(k + len("/services/"))
	}
	at := strings.LastIndexByte(s[a:k], '@')
	if at < 0 {
		return a
	}
	return sc.userinfo(a, a+at, 1, false)
}

// slackWebhook redacts the path of a Slack incoming webhook
// (https://hooks.slack.com/services/T…/B…/<secret>): whoever has it posts.
func (sc *scanner) slackWebhook(p int) int {
	s := sc.s
	e := p
	for e < len(s) && (class[s[e]]&cB64url != 0 || s[e] == '/') {
		e++
	}
	if e-p >= 20 && sc.emit(p, e, kindSlackWebhook) {
		return e
	}
	return p
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
	v := i + 1
	for v < len(s) && (s[v] == ' ' || s[v] == '\t') {
		v++
	}
	if !strong && fam != famAuth && fam != famCookie && !identifierLike(s[k.start:k.end]) {
		// Prose ("the staging db password: X"): the value must look like one.
		if fam, hexOK, ok := sc.proseName(i); ok && v > i+1 {
			if next, ok := sc.proseValue(v, fam, hexOK); ok {
				return next
			}
		}
		return i + 1
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
	k, query := queryKey(s, k)
	fam := classifyKey(s[k.start:k.end], query)
	v := i + 1
	for v < len(s) && (s[v] == ' ' || s[v] == '\t') {
		v++
	}
	if fam == famNone && strings.EqualFold(s[k.start:k.end], "pwd") && v < len(s) && s[v] != '/' && s[v] != '~' {
		fam = famSecret // pwd=X is a password; PWD=/home/agent is the shell's directory
	}
	if fam == famNone {
		return i + 1
	}
	if v >= len(s) {
		return v
	}
	if fam == famAuth {
		return sc.authValue(v, true)
	}
	return sc.value(v, '=', fam, false)
}
