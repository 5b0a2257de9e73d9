// The commit status a session puts on its branch's heads.

package checkpointd

import (
	"cmp"
	"fmt"
	"strings"
	"unicode/utf8"
)

// StatusContext is the context of the commit status checkpointd sets: the
// name a branch protection rule requires.
const StatusContext = "checkpointd/session"

// StatusState is a commit status's state, as Gitea and Forgejo spell it.
type StatusState string

const (
	StatusSuccess StatusState = "success"
	StatusPending StatusState = "pending"
	StatusFailure StatusState = "failure"
)

// severity orders states for a commit several sessions vouch for: the
// worst decides.
func (s StatusState) severity() int {
	switch s {
	case StatusFailure:
		return 2
	case StatusPending:
		return 1
	}
	return 0
}

// Worse reports whether s is worse than t.
func (s StatusState) Worse(t StatusState) bool { return s.severity() > t.severity() }

// maxStatusDescription bounds the one line a status says (forges cut
// longer ones, GitHub-compatible clients at 140).
const maxStatusDescription = 140

// SessionStatus is the commit status session s warrants: success while
// it is valid with a complete latest checkpoint (or ended completed);
// pending while it is stale, unverified, incomplete, without a checkpoint,
// parked, or ended otherwise; failure when it is invalidated or its lease
// is lost. The description says why in one line.
func SessionStatus(s *Session) (StatusState, string) {
	state, why := sessionStatus(s)
	return state, oneLine(why)
}

func sessionStatus(s *Session) (StatusState, string) {
	switch {
	case s.State != SessionActive && s.Outcome == OutcomeCompleted:
		return StatusSuccess, "the session completed"
	case s.State != SessionActive:
		return StatusPending, fmt.Sprintf("the session ended (%s): no agent vouches for this branch", cmp.Or(string(s.Outcome), "no outcome"))
	case s.Validity == ValidityInvalidated || s.Validity == ValidityLeaseLost:
		return StatusFailure, string(s.Validity) + ": " + ExplainValidity(s.Validity, s.ValidityReason)
	case s.Validity != ValidityValid:
		return StatusPending, string(s.Validity) + ": " + ExplainValidity(s.Validity, s.ValidityReason)
	case s.Parked:
		return StatusPending, "parked by an operator: waiting for a new run"
	case s.Latest == nil:
		return StatusPending, "no checkpoint written yet"
	case !s.Latest.Complete:
		return StatusPending, fmt.Sprintf("checkpoint #%d is incomplete: missing %s", s.Latest.Seq, strings.Join(s.Latest.Missing, ", "))
	}
	return StatusSuccess, fmt.Sprintf("valid: checkpoint #%d is complete and on the live head", s.Latest.Seq)
}

// oneLine folds whitespace and cuts s to maxStatusDescription bytes, on a
// rune boundary, with an ellipsis.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= maxStatusDescription {
		return s
	}
	cut := maxStatusDescription - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
