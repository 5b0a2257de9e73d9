// Package present holds how the CLI and the console show a session to a
// person, so both say the same thing the same way.
package present

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/checkpointd/checkpointd"
)

// Target names what a session works on: #issue, !pr, branch ("" for
// none).
func Target(s *checkpointd.Session) string {
	var parts []string
	if s.Issue > 0 {
		parts = append(parts, "#"+strconv.FormatInt(s.Issue, 10))
	}
	if s.PR > 0 {
		parts = append(parts, "!"+strconv.FormatInt(s.PR, 10))
	}
	if s.Branch != "" {
		parts = append(parts, s.Branch)
	}
	return strings.Join(parts, " ")
}

// Age is a duration in at most three characters and one unit, the way
// kubectl shows ages: 45s, 12m, 5h, 3d (days past 99 are still days).
func Age(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return strconv.Itoa(int(d/time.Second)) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + "m"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d/time.Hour)) + "h"
	}
	return strconv.Itoa(int(d/(24*time.Hour))) + "d"
}

// shortHex is how many hex digits of an id ShortID keeps: an id is a
// prefix and a UUIDv7, whose first 16 digits are its millisecond and a
// sequence within it that one replica never repeats. So the short id of a
// session is unique among those one replica made, and a prefix the CLI
// takes wherever it takes the id (it says when a prefix is ambiguous).
const shortHex = 16

// ShortID is id without its kind prefix (ses_, run_, …) and cut to its
// first 16 hex digits, as a person reads it in a table; an id of another
// shape comes back whole.
func ShortID(id string) string {
	i := strings.IndexByte(id, '_')
	if i < 0 || len(id)-i-1 != 32 {
		return id
	}
	return id[i+1 : i+1+shortHex]
}

// summaryFirst are the data members a person reads first, in this order;
// the others follow sorted.
var summaryFirst = []string{"outcome", "reason", "from", "to", "seq", "stage", "complete"}

// EventData is an event's data in one line as key=value pairs
// (summaryFirst, then the rest sorted), the members of a nested object as
// key.member=value (one level; deeper ones elided).
func EventData(raw json.RawMessage) string {
	var m map[string]any
	if len(raw) == 0 || json.Unmarshal(raw, &m) != nil || len(m) == 0 {
		return ""
	}
	var parts []string
	keys := slices.SortedFunc(maps.Keys(m), func(a, b string) int {
		ia, ib := slices.Index(summaryFirst, a), slices.Index(summaryFirst, b)
		switch {
		case ia >= 0 && ib >= 0:
			return ia - ib
		case ia >= 0:
			return -1
		case ib >= 0:
			return 1
		}
		return strings.Compare(a, b)
	})
	for _, k := range keys {
		if sub, ok := m[k].(map[string]any); ok {
			for _, sk := range slices.Sorted(maps.Keys(sub)) {
				if v, ok := scalar(sub[sk]); ok {
					parts = append(parts, k+"."+sk+"="+v)
				}
			}
			continue
		}
		if v, ok := scalar(m[k]); ok {
			parts = append(parts, k+"="+v)
		}
	}
	return strings.Join(parts, " ")
}

// scalar is a JSON value in a summary; false for a null.
func scalar(v any) (string, bool) {
	switch x := v.(type) {
	case nil:
		return "", false
	case string:
		if strings.ContainsAny(x, " =") {
			return strconv.Quote(x), true
		}
		return x, true
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), true
	case bool:
		return strconv.FormatBool(x), true
	case []any:
		return fmt.Sprintf("[%d]", len(x)), true
	}
	return "{…}", true
}
