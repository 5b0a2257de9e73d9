package checkpointd

import (
	"strings"

	"github.com/google/uuid"
)

// ID prefixes say what an identifier names, so a misplaced id is obvious in
// logs and answers.
const (
	PrefixSession = "ses_"
	PrefixRun     = "run_"
	PrefixToken   = "tok_"
)

// NewID returns prefix followed by a UUIDv7 in 32 hex digits: unique across
// replicas and ordered by creation time, so lists sort by id.
func NewID(prefix string) string {
	return prefix + strings.ReplaceAll(uuid.Must(uuid.NewV7()).String(), "-", "")
}
