package checkpointd

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
)

// maxCanonicalIntegerDigits bounds the decimal expansion of an integer
// written with an exponent ("1e999999"), so a short input cannot make the
// encoder allocate without limit. It is above the 309 digits of the largest
// float64, so every finite number the float path produces stays encodable.
const maxCanonicalIntegerDigits = 400

// CanonicalJSON encodes a generic JSON tree (map[string]any, []any, string,
// json.Number, float64, bool, nil) so that equal documents give equal bytes
// whatever their key order or white space: the idempotency digest is
// computed over it.
//
// Object keys are sorted by their UTF-16 code units (RFC 8785); there is no
// white space; strings escape only '"', '\' and control characters (\b \f
// \n \r \t, else \u00xx); integers are written in plain decimal ("1.0",
// "1e2" and "-0" become "1", "100" and "0"); other numbers use the shortest
// representation that round-trips through float64
// (strconv.FormatFloat(f, 'g', -1, 64)).
//
// It returns a plain (non-sentinel) error for a value of another type, a
// string or key that is not valid UTF-8, a non-finite number, or an integer
// of more than 400 digits: the tree comes from a decoder, so each of these
// is a programming error.
func CanonicalJSON(v any) ([]byte, error) {
	buf := make([]byte, 0, 1024)
	return appendCanonical(buf, v)
}

func appendCanonical(buf []byte, v any) ([]byte, error) {
	var err error
	switch v := v.(type) {
	case nil:
		return append(buf, "null"...), nil
	case bool:
		return strconv.AppendBool(buf, v), nil
	case string:
		return appendCanonicalString(buf, v)
	case json.Number:
		return appendCanonicalNumber(buf, string(v))
	case float64:
		return appendCanonicalFloat(buf, v)
	case []any:
		buf = append(buf, '[')
		for i, e := range v {
			if i > 0 {
				buf = append(buf, ',')
			}
			if buf, err = appendCanonical(buf, e); err != nil {
				return nil, err
			}
		}
		return append(buf, ']'), nil
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			if !utf8.ValidString(k) {
				return nil, fmt.Errorf("canonical JSON: object key %q is not valid UTF-8", k)
			}
			keys = append(keys, k)
		}
		slices.SortFunc(keys, compareUTF16)
		buf = append(buf, '{')
		for i, k := range keys {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf, _ = appendCanonicalString(buf, k) // validated above
			buf = append(buf, ':')
			if buf, err = appendCanonical(buf, v[k]); err != nil {
				return nil, err
			}
		}
		return append(buf, '}'), nil
	default:
		return nil, fmt.Errorf("canonical JSON: unsupported type %T", v)
	}
}

// compareUTF16 orders strings by their UTF-16 code units, as RFC 8785
// requires. That equals UTF-8 byte order except between a supplementary
// character (a surrogate pair, 0xD800–0xDBFF first) and U+E000–U+FFFF.
// Both strings must be valid UTF-8.
func compareUTF16(a, b string) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	if i == len(a) || i == len(b) {
		return len(a) - len(b) // one is a prefix of the other
	}
	// Back up to the start of the differing character; valid UTF-8 lead
	// bytes fix the length, so both strings start a character there.
	for i > 0 && !utf8.RuneStart(a[i]) {
		i--
	}
	ra, _ := utf8.DecodeRuneInString(a[i:])
	rb, _ := utf8.DecodeRuneInString(b[i:])
	if ka, kb := firstUTF16Unit(ra), firstUTF16Unit(rb); ka != kb {
		return int(ka) - int(kb)
	}
	return int(ra) - int(rb) // same high surrogate: low surrogates order as runes
}

func firstUTF16Unit(r rune) rune {
	if r >= 0x10000 {
		return 0xD800 + (r-0x10000)>>10
	}
	return r
}

const canonHex = "0123456789abcdef"

func appendCanonicalString(buf []byte, s string) ([]byte, error) {
	if !utf8.ValidString(s) {
		return nil, fmt.Errorf("canonical JSON: string is not valid UTF-8")
	}
	buf = append(buf, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		buf = append(buf, s[start:i]...)
		switch c {
		case '"', '\\':
			buf = append(buf, '\\', c)
		case '\b':
			buf = append(buf, '\\', 'b')
		case '\f':
			buf = append(buf, '\\', 'f')
		case '\n':
			buf = append(buf, '\\', 'n')
		case '\r':
			buf = append(buf, '\\', 'r')
		case '\t':
			buf = append(buf, '\\', 't')
		default:
			buf = append(buf, '\\', 'u', '0', '0', canonHex[c>>4], canonHex[c&0xF])
		}
		start = i + 1
	}
	buf = append(buf, s[start:]...)
	return append(buf, '"'), nil
}

// appendCanonicalNumber writes a JSON number literal. Integral values are
// expanded exactly from the literal's digits, so "1e2", "100.0" and "100"
// agree without a round trip through float64 (which would lose digits
// beyond 2^53); only non-integers are parsed as float64.
func appendCanonicalNumber(buf []byte, lit string) ([]byte, error) {
	neg, digits, exp, ok := splitNumber(lit)
	if !ok {
		return nil, fmt.Errorf("canonical JSON: %q is not a JSON number", lit)
	}
	if digits == "" {
		return append(buf, '0'), nil // any zero, incl. -0 and 0e5
	}
	if exp < 0 {
		// Out of range parses to ±Inf (rejected below) or 0; anything
		// else has been ruled out by splitNumber.
		f, err := strconv.ParseFloat(lit, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return nil, fmt.Errorf("canonical JSON: number %.20q: %w", lit, err)
		}
		return appendCanonicalFloat(buf, f)
	}
	if len(digits)+exp > maxCanonicalIntegerDigits {
		return nil, fmt.Errorf("canonical JSON: integer %.20q… has more than %d digits", lit, maxCanonicalIntegerDigits)
	}
	if neg {
		buf = append(buf, '-')
	}
	buf = append(buf, digits...)
	for range exp {
		buf = append(buf, '0')
	}
	return buf, nil
}

// appendCanonicalFloat writes integral values as plain integers, so a
// float64 tree and a json.Number tree of the same integers agree, and other
// values in the shortest form that round-trips.
func appendCanonicalFloat(buf []byte, f float64) ([]byte, error) {
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		return nil, fmt.Errorf("canonical JSON: number %v is not finite", f)
	case f == 0:
		return append(buf, '0'), nil // also -0
	case f == math.Trunc(f):
		return strconv.AppendFloat(buf, f, 'f', -1, 64), nil
	default:
		return strconv.AppendFloat(buf, f, 'g', -1, 64), nil
	}
}

// splitNumber takes a JSON number literal apart into its sign, its
// significant digits without leading or trailing zeros, and the decimal
// exponent that applies to them: value = ±digits × 10^exp. Exponents are
// clamped far beyond any usable range so a huge one cannot overflow.
func splitNumber(lit string) (neg bool, digits string, exp int, ok bool) {
	s := lit
	if s != "" && s[0] == '-' {
		neg, s = true, s[1:]
	}
	intEnd := 0
	for intEnd < len(s) && isCanonDigit(s[intEnd]) {
		intEnd++
	}
	if intEnd == 0 {
		return false, "", 0, false
	}
	intPart, frac := s[:intEnd], ""
	s = s[intEnd:]
	if s != "" && s[0] == '.' {
		n := 1
		for n < len(s) && isCanonDigit(s[n]) {
			n++
		}
		if n == 1 {
			return false, "", 0, false
		}
		frac, s = s[1:n], s[n:]
	}
	if s != "" && (s[0] == 'e' || s[0] == 'E') {
		s = s[1:]
		eneg := false
		if s != "" && (s[0] == '+' || s[0] == '-') {
			eneg, s = s[0] == '-', s[1:]
		}
		if s == "" {
			return false, "", 0, false
		}
		for ; s != "" && isCanonDigit(s[0]); s = s[1:] {
			if exp < 1e9 {
				exp = exp*10 + int(s[0]-'0')
			}
		}
		if eneg {
			exp = -exp
		}
	}
	if s != "" {
		return false, "", 0, false
	}
	all := intPart + frac
	exp -= len(frac)
	i := 0
	for i < len(all) && all[i] == '0' {
		i++
	}
	j := len(all)
	for j > i && all[j-1] == '0' {
		j--
	}
	return neg, all[i:j], exp + len(all) - j, true
}

func isCanonDigit(c byte) bool { return '0' <= c && c <= '9' }
