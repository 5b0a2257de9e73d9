package checkpointd

import (
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// ValidateTokenName checks an API token's name (who or what it is for):
// 1–MaxNameLength bytes of UTF-8 with no control characters (newline,
// tab, escape, DEL, C1) and no format characters (bidi overrides,
// zero-width spaces). Names are printed one per line in `token list` and
// in logs; such characters would forge a row, shift the columns or make
// the text read otherwise than it is. Callers trim surrounding space
// first. Errors: ErrInvalidRequest (a ValidationError on "name").
func ValidateTokenName(name string) error {
	switch {
	case name == "" || len(name) > MaxNameLength:
		return Invalid("/name", fmt.Sprintf("must be 1-%d bytes", MaxNameLength))
	case !utf8.ValidString(name):
		return Invalid("/name", "must be UTF-8")
	}
	for _, r := range name {
		if !printableNameRune(r) {
			return Invalid("/name", fmt.Sprintf("must not contain control or format characters (found %U)", r))
		}
	}
	return nil
}

// printableNameRune reports whether r may appear in a token name.
func printableNameRune(r rune) bool {
	return !unicode.Is(unicode.Cc, r) && !unicode.Is(unicode.Cf, r)
}

// DisplayTokenName is name as one line of a listing: as it is when it is
// a valid name, quoted with Go escapes otherwise (a name stored before
// ValidateTokenName refused control characters).
func DisplayTokenName(name string) string {
	if ValidateTokenName(name) == nil {
		return name
	}
	return strconv.Quote(name)
}
