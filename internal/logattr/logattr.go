// Package logattr builds the log attributes several packages share, so a
// line reads the same whoever writes it.
package logattr

import (
	"log/slog"
	"maps"
	"slices"
)

// Counts logs a map of counts as a group, its keys sorted: key.valid=3
// key.stale=1 in text, {"key":{"valid":3,"stale":1}} in JSON, rather than
// Go's map[stale:1 valid:3]. An empty map logs nothing.
func Counts(key string, m map[string]int) slog.Attr {
	attrs := make([]any, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		attrs = append(attrs, slog.Int(k, m[k]))
	}
	return slog.Group(key, attrs...)
}
