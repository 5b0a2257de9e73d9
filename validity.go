package checkpointd

import "strings"

// ValidityEvidence is what the daemon knows about a session's latest
// checkpoint. Webhooks, reconcile, lease changes and checkpoint writes all
// judge through JudgeValidity, so the verdict never depends on which of them
// brought the evidence.
type ValidityEvidence struct {
	// Invalidated is set once the session was invalidated (its PR closed
	// or its branch was deleted); it is final.
	Invalidated bool
	// LeasesHeld is false when a lease the checkpoint names has expired, was
	// released or is held by another run.
	LeasesHeld bool
	// Head is the checkpoint's workspace.head.
	Head string
	// Live is the last observation of the session's branch or PR that the
	// judgement rests on; nil when nothing was observed. An ended ref
	// invalidates; an ambiguous one counts as no evidence.
	Live *LiveRef
}

// Validity explanations that do not depend on the evidence's details.
const (
	// ReasonNoCheckpoint is why a new session is unverified.
	ReasonNoCheckpoint = "no checkpoint written yet: nothing to check against the forge"
	// ReasonNoLiveHead is why a checkpoint no observation confirms is
	// unverified.
	ReasonNoLiveHead = "no live head observed yet: no webhook or reconcile pass has reported the session's branch or pull request"
	// ReasonNoHead is why a checkpoint without a head is unverified.
	ReasonNoHead = "the checkpoint records no head to compare"
	// ReasonLeaseLost is why a checkpoint naming a lease its run lost is
	// lease_lost.
	ReasonLeaseLost = "a lease the checkpoint names is no longer held by its run"
)

// JudgeValidity returns the validity the evidence supports and an
// explanation of it that names the evidence (empty only for valid). It
// never guesses upward: without a live observation the verdict is
// unverified, never valid.
func JudgeValidity(e ValidityEvidence) (Validity, string) {
	live := e.Live
	if live != nil && live.State == "" {
		live = nil // a placeholder row: nothing observed
	}
	switch {
	case live != nil && live.State.Gone():
		return ValidityInvalidated, EndedReason(live)
	case e.Invalidated:
		return ValidityInvalidated, "invalidated earlier: the session's pull request or branch ended"
	case !e.LeasesHeld:
		return ValidityLeaseLost, ReasonLeaseLost
	case live == nil:
		return ValidityUnverified, ReasonNoLiveHead
	case live.State == RefAmbiguous:
		return ValidityUnverified, ambiguousReason(live)
	case e.Head == "":
		return ValidityUnverified, ReasonNoHead
	case strings.EqualFold(e.Head, live.Head):
		return ValidityValid, ""
	}
	return ValidityStale, "the live head " + live.Head + " differs from the checkpoint's head " + e.Head
}

// EndedReason says how the ref l ended, as its last observation says.
// Explanations name no source: the validity event carries the evidence,
// and an explanation that changed with every observation would be a new
// record each time.
func EndedReason(l *LiveRef) string {
	what := l.Name()
	switch {
	case l.State == RefMerged:
		what += " was merged"
	case l.State == RefClosed:
		what += " was closed without being merged"
	default:
		what += " was deleted"
	}
	return what
}

// ambiguousReason explains an observation that counts as no evidence.
func ambiguousReason(l *LiveRef) string {
	return "the last observed head " + l.Head + " of " + l.Name() +
		" is ambiguous: it does not continue the head observed before it (a redelivered or out-of-order push)," +
		" or it was observed before a restart or a failed forge check; it counts as no evidence until reconcile asks the forge"
}

// ExplainValidity returns reason, or for a verdict stored without one (by
// an earlier version) the general explanation of v: a session that is not
// valid is never shown without a why.
func ExplainValidity(v Validity, reason string) string {
	if reason != "" || v == ValidityValid {
		return reason
	}
	switch v {
	case ValidityStale:
		return "the live head differs from the checkpoint's head"
	case ValidityLeaseLost:
		return ReasonLeaseLost
	case ValidityInvalidated:
		return "the pull request closed or the branch was deleted"
	}
	return "not checked against live evidence yet"
}
