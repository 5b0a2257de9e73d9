package checkpointd

import (
	"strconv"
	"strings"
	"time"
)

// LiveRefState says what became of an observed ref.
type LiveRefState string

// Live ref states. Ambiguous means observations arrived in an order that
// cannot be trusted (e.g. a stale redelivery): it counts as no evidence
// until reconcile asks the forge.
const (
	RefOpen      LiveRefState = "open"
	RefAmbiguous LiveRefState = "ambiguous"
	RefDeleted   LiveRefState = "deleted" // branch (or PR) deleted
	RefClosed    LiveRefState = "closed"  // PR closed without merge
	RefMerged    LiveRefState = "merged"  // PR merged
)

// Gone reports whether the ref ended: a session bound to it is invalidated.
func (s LiveRefState) Gone() bool { return s == RefDeleted || s == RefClosed || s == RefMerged }

// LiveRef is the last observed head of a branch or a PR.
type LiveRef struct {
	Repo       string       `json:"repo"`
	Branch     string       `json:"branch,omitempty"`
	PR         int64        `json:"pr,omitempty"`
	Head       string       `json:"head"`
	State      LiveRefState `json:"state"`
	ObservedAt time.Time    `json:"observed_at"`
	Source     string       `json:"source"`
}

// Observation is one piece of evidence about a ref, from a webhook delivery
// or a reconcile pass: a head, or the end of the ref.
type Observation struct {
	Repo   string // owner/name as the forge spelled it
	RepoID int64  // the forge's stable repository id, 0 when unknown
	Branch string // a branch ref …
	PR     int64  // … or a pull request
	Head   string // the observed head, lower-case hex
	// Before is the head a push replaced; it orders pushes: a push whose
	// Before is not the head we hold arrived out of order.
	Before string
	// End is set when the branch was deleted or the PR closed or merged.
	End LiveRefState
	// Authoritative observations (from the forge API) replace whatever was
	// held; hints (webhooks) must not overwrite newer evidence.
	Authoritative bool
	Source        string // webhook:<delivery id> or reconcile:<pass id>
}

// ValidCommitID accepts a full SHA-1 or SHA-256 object id in hex, either
// case: anything else in a head field is malformed, not evidence.
func ValidCommitID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i] | 0x20; !('0' <= s[i] && s[i] <= '9') && !('a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// RefKey is how a ref is keyed where live refs are kept: "pr:<n>" for a
// pull request, else "branch:<name>". ParseRefKey is its inverse.
func RefKey(branch string, pr int64) string {
	if pr > 0 {
		return "pr:" + strconv.FormatInt(pr, 10)
	}
	return "branch:" + branch
}

// ParseRefKey is the inverse of RefKey: a branch name, or a PR.
func ParseRefKey(key string) (branch string, pr int64) {
	if n, ok := strings.CutPrefix(key, "pr:"); ok {
		pr, _ = strconv.ParseInt(n, 10, 64)
		return "", pr
	}
	return strings.TrimPrefix(key, "branch:"), 0
}

// RefName is how an observation's ref is keyed.
func (o Observation) RefName() string { return RefKey(o.Branch, o.PR) }

// Key is how the live ref is keyed.
func (l LiveRef) Key() string { return RefKey(l.Branch, l.PR) }

// ObservationEffects counts what evidence changed.
type ObservationEffects struct {
	LiveRefs       int            `json:"live_refs"`
	Ambiguous      int            `json:"ambiguous,omitempty"`
	Sessions       map[string]int `json:"sessions"` // new validity → sessions moved to it
	LeasesReleased int            `json:"leases_released"`
}

// Name is how people call the ref: "branch fix-12" or "pull request #34".
func (l LiveRef) Name() string {
	if l.PR > 0 {
		return "pull request #" + strconv.FormatInt(l.PR, 10)
	}
	return "branch " + l.Branch
}

// NextRefState is the live-ref transition: the state observation o gives
// a ref whose last recorded state is prev (prev.State empty: never
// observed). apply is false when o changes nothing and must not be
// recorded: a webhook's hint about a pull request that ended.
func NextRefState(prev LiveRef, o Observation) (next LiveRefState, apply bool) {
	switch {
	case o.End != "":
		return o.End, true
	case o.Authoritative || prev.State == "":
		return RefOpen, true
	case prev.State.Gone() && o.PR == 0:
		// A push to a deleted branch name recreates the branch.
		return RefOpen, true
	case prev.State.Gone():
		// A PR that ended stays ended until the forge says it reopened;
		// a merged or deleted one cannot reopen.
		if o.Before == "" && prev.State == RefClosed {
			return RefOpen, true // reopened
		}
		return prev.State, false
	case o.Before != "" && !strings.EqualFold(prev.Head, o.Before) && !strings.EqualFold(prev.Head, o.Head):
		// A push that does not continue the head we hold arrived out of
		// order (or is a stale redelivery): the evidence is ambiguous.
		return RefAmbiguous, true
	}
	return RefOpen, true
}
