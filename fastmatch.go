package checkpointd

// fastMatchers are hand-written equivalents of the schema's patterns, on
// valid UTF-8 (the only strings a decoded tree holds); a pattern without one
// runs through regexp, the engine's own regexp package.
// TestFastMatchers and FuzzFastMatchers compare each with the regexp.
var fastMatchers = map[string]func(string) bool{
	`^[A-Za-z0-9_.:-]{1,64}$`: func(s string) bool {
		return len(s) >= 1 && len(s) <= 64 && allBytes(s, func(c byte) bool { return isAlnum(c) || c == '_' || c == '.' || c == ':' || c == '-' })
	},
	`^[a-z][a-z0-9_.-]{0,63}$`: func(s string) bool {
		return len(s) >= 1 && len(s) <= 64 && s[0] >= 'a' && s[0] <= 'z' &&
			allBytes(s, func(c byte) bool { return c >= 'a' && c <= 'z' || isCanonDigit(c) || c == '_' || c == '.' || c == '-' })
	},
	`^[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}$`: func(s string) bool {
		part := func(p string) bool {
			return len(p) >= 1 && len(p) <= 100 && allBytes(p, func(c byte) bool { return isAlnum(c) || c == '_' || c == '.' || c == '-' })
		}
		for i := 0; i < len(s); i++ {
			if s[i] == '/' {
				return part(s[:i]) && part(s[i+1:])
			}
		}
		return false
	},
	`^([0-9a-fA-F]{40}|[0-9a-fA-F]{64})$`: func(s string) bool {
		return (len(s) == 40 || len(s) == 64) && allBytes(s, func(c byte) bool {
			return isCanonDigit(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
		})
	},
	// In UTF-8 every byte of a multi-byte sequence is ≥ 0x80, so no code
	// point is a control character unless one of its bytes is.
	`^[^\x00-\x1F\x7F]*$`: func(s string) bool {
		return allBytes(s, func(c byte) bool { return c >= 0x20 && c != 0x7f })
	},
}

func allBytes(s string, ok func(byte) bool) bool {
	for i := 0; i < len(s); i++ {
		if !ok(s[i]) {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// fastDateTime accepts the RFC 3339 date-times the engine's "date-time"
// format accepts, written the ordinary way:
// YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM), "t" and "z" in either case, no
// leap second (a second of 60 goes to the engine, which judges it by the
// offset). Anything else returns false and goes to the engine.
func fastDateTime(s string) bool {
	if len(s) < 20 || s[4] != '-' || s[7] != '-' || s[10] != 'T' && s[10] != 't' || s[13] != ':' || s[16] != ':' {
		return false
	}
	num := func(i, n int) int {
		x := 0
		for _, c := range []byte(s[i : i+n]) {
			if !isCanonDigit(c) {
				return -1
			}
			x = x*10 + int(c-'0')
		}
		return x
	}
	y, mo, d, h, mi, sec := num(0, 4), num(5, 2), num(8, 2), num(11, 2), num(14, 2), num(17, 2)
	if y < 0 || mo < 1 || mo > 12 || d < 1 || d > daysIn(mo, y) || h < 0 || h > 23 || mi < 0 || mi > 59 || sec < 0 || sec > 59 {
		return false
	}
	rest := s[19:]
	if len(rest) > 0 && rest[0] == '.' {
		i := 1
		for i < len(rest) && isCanonDigit(rest[i]) {
			i++
		}
		if i == 1 {
			return false
		}
		rest = rest[i:]
	}
	if rest == "Z" || rest == "z" {
		return true
	}
	if len(rest) != 6 || rest[0] != '+' && rest[0] != '-' || rest[3] != ':' {
		return false
	}
	zh, zm := -1, -1
	if isCanonDigit(rest[1]) && isCanonDigit(rest[2]) && isCanonDigit(rest[4]) && isCanonDigit(rest[5]) {
		zh, zm = int(rest[1]-'0')*10+int(rest[2]-'0'), int(rest[4]-'0')*10+int(rest[5]-'0')
	}
	return zh >= 0 && zh <= 23 && zm >= 0 && zm <= 59
}

func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}
