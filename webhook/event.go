package webhook

import "strings"

// Event is what Parse makes of a delivery: Push, BranchDeleted, PullRequest
// or Ignored. The unexported method keeps the set closed, so a type switch
// over these four is exhaustive.
type Event interface{ eventName() string }

// Repo identifies the repository a delivery is about. ID is the forge's
// stable id (0 when the payload has none); FullName is "owner/name" at the
// time of the delivery and changes on rename or transfer.
type Repo struct {
	ID       int64
	FullName string
}

// Push is a push that moved refs/heads/Branch from Before to After. Both
// SHAs are lowercase hex, 40 or 64 digits; Before is the zero SHA for a new
// branch. Branch is the short name and may contain '/'.
type Push struct {
	Repo          Repo
	Branch        string
	Before, After string
}

// BranchDeleted is a branch that no longer exists: a delete event with
// ref_type branch, or a push whose after is the zero SHA. Branch is the
// short name.
type BranchDeleted struct {
	Repo   Repo
	Branch string
}

// PullRequest is a pull request whose head, base or open state may have
// changed. Action is opened, reopened, synchronized, edited, closed or
// deleted; Closed is true when the PR ended — closed (merged or not),
// deleted, or any action on a PR whose state is closed — and Merged copies
// pull_request.merged. HeadSHA is lowercase hex. HeadRef is the head branch,
// or refs/pull/<n>/head once that branch is gone, in which case HeadLabel
// still names it.
type PullRequest struct {
	Repo      Repo
	Number    int64
	Action    string
	HeadSHA   string
	HeadRef   string
	HeadLabel string
	BaseRef   string
	Closed    bool
	Merged    bool
}

// Ignored is a delivery that needs no action beyond acknowledging it (2xx):
// Event is the delivery's event type and Reason says why it is ignored.
type Ignored struct {
	Event  string
	Reason string
}

func (Push) eventName() string          { return "push" }
func (BranchDeleted) eventName() string { return "branch_deleted" }
func (PullRequest) eventName() string   { return "pull_request" }
func (Ignored) eventName() string       { return "ignored" }

// Reasons given in Ignored.Reason.
const (
	reasonUnhandled    = "event not handled"
	reasonCreate       = "create: the push that goes with it carries the head"
	reasonTagPush      = "push to a tag"
	reasonOtherRef     = "push to a ref that is neither branch nor tag"
	reasonTestDelivery = "push with before == after (test delivery)"
	reasonTagDelete    = "tag deleted"
	reasonSecretRef    = "branch name looks like a secret: no session can name it, and it is not kept"
	reasonOtherRefType = "delete of a ref_type other than branch"
	reasonAction       = "pull request action not handled"
	reasonNullPR       = "pull_request is null"
	reasonComment      = "pull request comment"
)

// IsZeroSHA reports whether s is the zero object id the forges use for "no
// commit": 40 zeros in SHA-1 repositories, 64 in SHA-256 ones.
func IsZeroSHA(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	return strings.Trim(s, "0") == ""
}

// normSHA returns s lowercased if it is a 40- or 64-digit hex object id.
func normSHA(s string) (string, bool) {
	if len(s) != 40 && len(s) != 64 {
		return "", false
	}
	upper := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case '0' <= c && c <= '9', 'a' <= c && c <= 'f':
		case 'A' <= c && c <= 'F':
			upper = true
		default:
			return "", false
		}
	}
	if upper {
		s = strings.ToLower(s)
	}
	return s, true
}

// validName reports whether s is a non-empty name without control
// characters or invalid UTF-8 (which JSON decoding turns into U+FFFD):
// branch names and refs end up in logs and the database.
func validName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < ' ' || r == 0x7f || r == '\uFFFD' {
			return false
		}
	}
	return true
}
