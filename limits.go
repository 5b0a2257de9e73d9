package checkpointd

import (
	"regexp"
	"unicode/utf8"
)

// Documented limits on identifiers and bodies (docs/api.md). They are
// enforced at the API with 422 and sit well inside what the indexes accept.
const (
	DefaultMaxDocumentBytes = 256 << 10 // a checkpoint document
	MaxRequestBytes         = 64 << 10  // any other JSON request body
	MaxIDLength             = 64
	MaxBranchLength         = 255
	MaxPathLength           = 4096
	MaxNameLength           = 128 // agent runtime, model, instance, capability …
	MaxCapabilities         = 64
	MaxReasonLength         = 1024
	MaxIdempotencyKeyLength = 255
)

var (
	repoPattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}$`)
	idPattern   = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,64}$`)
)

// ValidRepo reports whether s names a repository as owner/name.
func ValidRepo(s string) bool { return repoPattern.MatchString(s) }

// ValidID reports whether s has the shape of a server-issued identifier.
// A malformed id can never name anything, so callers answer 404 for it.
func ValidID(s string) bool { return idPattern.MatchString(s) }

// ValidBranch reports whether s is an acceptable branch name: 1–255 bytes of
// UTF-8 without control characters. Git's own rules are stricter; the forge
// enforces them.
func ValidBranch(s string) bool {
	if s == "" || len(s) > MaxBranchLength || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}
