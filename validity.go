package checkpointd

import "strings"

// ValidityEvidence is what the daemon knows about a session's latest
// checkpoint. Webhooks, reconcile, lease changes and checkpoint writes all
// judge through JudgeValidity, so the verdict never depends on which of them
// brought the evidence.
type ValidityEvidence struct {
	// Invalidated is set once the session's PR closed or its branch was
	// deleted; it is final.
	Invalidated bool
	// LeasesHeld is false when a lease the checkpoint names has expired, was
	// released or is held by another run.
	LeasesHeld bool
	// Head is the checkpoint's workspace.head, LiveHead the last observed
	// head of the session's branch or PR ("" when nothing was observed).
	Head, LiveHead string
}

// JudgeValidity returns the validity the evidence supports and a short
// reason. It never guesses upward: without a live observation the verdict
// is unverified, never valid.
func JudgeValidity(e ValidityEvidence) (Validity, string) {
	switch {
	case e.Invalidated:
		return ValidityInvalidated, "the pull request closed or the branch was deleted"
	case !e.LeasesHeld:
		return ValidityLeaseLost, "a lease the checkpoint names is no longer held by its run"
	case e.LiveHead == "":
		return ValidityUnverified, "no live head observed yet"
	case e.Head == "":
		return ValidityUnverified, "the checkpoint records no head to compare"
	case strings.EqualFold(e.Head, e.LiveHead):
		return ValidityValid, ""
	}
	return ValidityStale, "the live head " + e.LiveHead + " differs from the checkpoint's head " + e.Head
}
