package checkpointd

import "strings"

// ValidityEvidence is what the daemon knows about a session's latest
// checkpoint. Webhooks, reconcile, lease changes and checkpoint writes all
// judge through Rejudge (a write through JudgeWrite, which calls it), so the
// verdict never depends on which of them brought the evidence.
type ValidityEvidence struct {
	// LeasesHeld is false when a lease the checkpoint names has expired, was
	// released or is held by another run. Losing a lease outranks every
	// observation but an ended ref, whose sessions were invalidated when it
	// was observed: a judgement of a lost lease needs no Live.
	LeasesHeld bool
	// Head is the checkpoint's workspace.head.
	Head string
	// Live is the last observation of the session's branch or PR that the
	// judgement rests on; nil when nothing was observed. An ended ref
	// invalidates; an ambiguous one counts as no evidence.
	Live *LiveRef
	// Unanswered, with Live nil, is why there is no observation to judge
	// by (the forge could not answer for the ref); empty: none was made
	// yet (ReasonNoLiveHead).
	Unanswered string
}

// Verdict is a session's validity and the explanation of it (empty only
// for valid).
type Verdict struct {
	Validity Validity
	Reason   string
}

// Rejudge returns the verdict the evidence supports for a session whose
// verdict is current, and whether it differs from current (in validity or
// in its explanation: a new explanation is recorded, not counted as a
// move). Invalidated is final: once a session's ref ended, no evidence
// brings it back.
func Rejudge(current Verdict, e ValidityEvidence) (Verdict, bool) {
	if current.Validity == ValidityInvalidated {
		return current, false
	}
	v, reason := JudgeValidity(e)
	next := Verdict{v, reason}
	return next, next != current
}

// Restarted is the verdict after a daemon restart, for a session whose
// verdict was current: webhooks sent while it was down are lost, so
// nothing observed before counts. Every session not invalidated (final)
// becomes unverified, for reason; changed is false for one already
// unverified.
func Restarted(current Verdict, reason string) (next Verdict, changed bool) {
	if current.Validity == ValidityInvalidated || current.Validity == ValidityUnverified {
		return current, false
	}
	return Verdict{ValidityUnverified, reason}, true
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
// explanation of it that names the evidence (empty only for valid), for a
// session not invalidated before (Rejudge keeps that final). It never
// guesses upward: without a live observation the verdict is unverified,
// never valid.
func JudgeValidity(e ValidityEvidence) (Validity, string) {
	live := e.Live
	if live != nil && live.State == "" {
		live = nil // a placeholder row: nothing observed
	}
	switch {
	case live != nil && live.State.Gone():
		return ValidityInvalidated, EndedReason(live)
	case !e.LeasesHeld:
		return ValidityLeaseLost, ReasonLeaseLost
	case live == nil && e.Unanswered != "":
		return ValidityUnverified, e.Unanswered
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
