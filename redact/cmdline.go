// Redaction of short password options, decided by the command they belong to.

package redact

import "strings"

// passwordOptions are the commands whose short option -<flag> takes a
// password. For any other command -p is a port (ssh, docker run), "parents"
// (mkdir) or "patch" (git add) and is kept. spaced says "-p X" passes the
// password too; mysql reads "-p X" as "prompt, then use database X", so
// only "-pX" is a password there.
var passwordOptions = [...]struct {
	flag   byte
	name   string // the command's base name
	prefix bool   // name is a prefix (mysqldump, mariadb-admin, mongosh, ldapsearch)
	spaced bool
	sub    string // a subcommand that must stand between command and option
}{
	{'p', "mysql", true, false, ""},
	{'p', "mariadb", true, false, ""},
	{'p', "sshpass", false, true, ""},
	{'p', "mongo", true, true, ""},
	{'p', "docker", false, true, "login"},
	{'p', "podman", false, true, "login"},
	{'a', "redis-cli", false, true, ""},
	{'w', "ldap", true, true, ""},
}

// maxCommand bounds how far back shortFlag looks for the command.
const maxCommand = 160

// shortFlag handles -pX, -p X, -a X and -w X (i is the '-') when the
// command they belong to takes a password there.
func (sc *scanner) shortFlag(i int) int {
	s := sc.s
	if i+2 >= len(s) {
		return i + 1
	}
	v, spaced := i+2, s[i+2] == ' '
	if spaced {
		for v < len(s) && s[v] == ' ' {
			v++
		}
		if v >= len(s) || s[v] == '-' {
			return i + 1
		}
	} else if isSpace(s[v]) {
		return i + 1
	}
	ok, spacedOK := sc.commandTakesPassword(i, s[i+1])
	if !ok || (spaced && !spacedOK) {
		return i + 1
	}
	a, b, end, quoted := quotedAt(s, v)
	if !quoted {
		a, b = v, v
		for b < len(s) && b-v < maxValue && class[s[b]]&cStopEq == 0 {
			b++
		}
		end = b
	}
	if sc.emitValue(a, b, kindQuerySecret, false) {
		return end
	}
	return i + 1
}

// commandTakesPassword looks back from the option at i over the words of
// its command (to the start of the line or a ; | & ( ` before it) for one
// whose base name takes a password in -<flag>.
func (sc *scanner) commandTakesPassword(i int, flag byte) (ok, spaced bool) {
	s := sc.s
	stop := max(sc.last, i-maxCommand)
	sawLogin := false
	for e := i; e > stop; {
		c := s[e-1]
		if class[c]&cCommandStop != 0 {
			break
		}
		if class[c]&cStopColon != 0 { // blanks and quotes separate words
			e--
			continue
		}
		j := e
		for j > stop && class[s[j-1]]&(cStopColon|cCommandStop) == 0 {
			j--
		}
		word := s[j:e]
		e = j
		if k := strings.LastIndexByte(word, '/'); k >= 0 {
			word = word[k+1:]
		}
		if len(word) < 5 || class[word[0]]&cLower == 0 {
			continue // every command name below is longer and lower case
		}
		sawLogin = sawLogin || word == "login"
		for _, o := range passwordOptions {
			if o.flag != flag || (o.sub != "" && !sawLogin) {
				continue
			}
			if word == o.name || (o.prefix && strings.HasPrefix(word, o.name)) {
				return true, o.spaced
			}
		}
	}
	return false, false
}
