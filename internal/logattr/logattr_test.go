package logattr_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/checkpointd/checkpointd/internal/logattr"
)

// TestCounts: a map of counts reads as key=value pairs, sorted, in text,
// as an object in JSON, and not at all when empty.
func TestCounts(t *testing.T) {
	var text, js bytes.Buffer
	for _, l := range []*slog.Logger{slog.New(slog.NewTextHandler(&text, nil)), slog.New(slog.NewJSONHandler(&js, nil))} {
		l.Info("pass", logattr.Counts("changed", map[string]int{"valid": 3, "stale": 1}), logattr.Counts("verdicts", map[string]int{}))
	}
	if !strings.Contains(text.String(), " changed.stale=1 changed.valid=3") || strings.Contains(text.String(), "map[") ||
		strings.Contains(text.String(), "verdicts") {
		t.Errorf("text: %s", text.String())
	}
	if !strings.Contains(js.String(), `"changed":{"stale":1,"valid":3}`) || strings.Contains(js.String(), "verdicts") {
		t.Errorf("json: %s", js.String())
	}
}
