// What the forge says of a checkpoint's pending mutation.

package checkpointd

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// MutationOutcome is whether a pending mutation happened, as the forge
// shows it.
type MutationOutcome string

const (
	MutationDone    MutationOutcome = "done"
	MutationNotDone MutationOutcome = "not_done"
	// MutationUnknown: the forge was not asked (kind not known, no forge
	// configured) or could not say (unreachable, slow, ambiguous). Never a
	// guess.
	MutationUnknown MutationOutcome = "unknown"
)

// The mutation kinds the daemon can check against the forge.
const (
	MutationPRCreate     = "gitea.pr.create"
	MutationPRComment    = "gitea.pr.comment"
	MutationIssueComment = "gitea.issue.comment"
	MutationPRReview     = "gitea.pr.review"
	MutationPRMerge      = "gitea.pr.merge"
	MutationGitPush      = "git.push"
)

// MutationEvidence is what the forge showed: the pull request, comment or
// review found, with its address, or the head the branch is at.
type MutationEvidence struct {
	PR        int64  `json:"pr,omitempty"`
	CommentID int64  `json:"comment_id,omitempty"`
	ReviewID  int64  `json:"review_id,omitempty"`
	URL       string `json:"url,omitempty"`
	State     string `json:"state,omitempty"` // a PR's: open, closed, merged
	Head      string `json:"head,omitempty"`
}

// MutationAnswer is the forge's answer about one pending mutation.
type MutationAnswer struct {
	Outcome  MutationOutcome   `json:"outcome"`
	Evidence *MutationEvidence `json:"evidence,omitempty"`
	// Reason says in a line what was found, or why the outcome is unknown.
	Reason    string    `json:"reason"`
	CheckedAt time.Time `json:"checked_at"`
}

// MutationMarker is the text an agent puts in what it posts (a comment, a
// review) so that the daemon can find it by the mutation's idempotency
// key. In Markdown an HTML comment, <!-- checkpointd:KEY -->, renders
// invisibly on Gitea and Forgejo.
func MutationMarker(key string) string { return "checkpointd:" + key }

// HasMarker reports whether body carries the marker of key as a whole
// word: key "k1" is not found in "checkpointd:k10".
func HasMarker(body, key string) bool {
	marker := MutationMarker(key)
	for rest := body; ; {
		i := strings.Index(rest, marker)
		if i < 0 {
			return false
		}
		rest = rest[i+len(marker):]
		if rest == "" || !markerByte(rest[0]) {
			return true
		}
	}
}

// markerByte is a byte an idempotency key may go on with: one that makes a
// longer key.
func markerByte(c byte) bool {
	return c == '-' || c == '_' || c == '.' || c == ':' || c == '/' ||
		'0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// MutationTarget is a mutation's target: owner/name!N names a pull
// request, owner/name#N an issue.
type MutationTarget struct {
	Repo   string
	Number int64
	PR     bool
}

// ParseMutationTarget reads owner/name!N or owner/name#N.
func ParseMutationTarget(s string) (MutationTarget, error) {
	i := strings.LastIndexAny(s, "!#")
	if i < 0 {
		return MutationTarget{}, fmt.Errorf("target %q names no pull request (owner/name!N) or issue (owner/name#N)", s)
	}
	repo, num := s[:i], s[i+1:]
	n, err := strconv.ParseInt(num, 10, 64)
	owner, name, ok := strings.Cut(repo, "/")
	if err != nil || n <= 0 || !ok || owner == "" || name == "" || strings.Contains(name, "/") {
		return MutationTarget{}, fmt.Errorf("target %q is not owner/name!N or owner/name#N", s)
	}
	return MutationTarget{Repo: repo, Number: n, PR: s[i] == '!'}, nil
}
