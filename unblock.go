package checkpointd

import (
	"slices"
	"time"
)

// EvidenceSources says what can give the daemon evidence about live heads:
// signed webhook deliveries (a secret is configured, or unsigned ones are
// allowed) and a forge that reconcile can ask (--gitea-url). With neither,
// nothing can ever make a session valid.
type EvidenceSources struct {
	Webhooks bool `json:"webhooks"`
	Forge    bool `json:"forge"`
}

// None is true when no source of evidence is configured.
func (e EvidenceSources) None() bool { return !e.Webhooks && !e.Forge }

// NoEvidenceNotice is what an operator is told when no source of evidence
// is configured: validity cannot leave unverified, so no session is
// resumable and no drain with an active session can complete.
const NoEvidenceNotice = "no forge (--gitea-url) and no webhook secret (--webhook-secret) are configured: " +
	"nothing can vouch for a live head, so sessions stay unverified, none is resumable, and a drain " +
	"completes only when no session is active"

// UnblockAction names what unblocks a session that blocks a drain.
type UnblockAction string

// Unblocking actions, from the agent's side (write, wait) to the
// operator's (park, end, configure, investigate).
const (
	// UnblockWrite: the agent writes a complete checkpoint (at the live
	// head, naming only leases it holds).
	UnblockWrite = UnblockAction("write_checkpoint")
	// UnblockWaitEvidence: a webhook delivery or the forge will vouch for
	// the recorded head; with a forge, drain complete asks it first.
	UnblockWaitEvidence = UnblockAction("wait_for_evidence")
	// UnblockConfigure: no evidence source is configured.
	UnblockConfigure = UnblockAction("configure_evidence")
	// UnblockPark: the run is unresponsive; parking leaves the session
	// blocking only for what its latest checkpoint lacks.
	UnblockPark = UnblockAction("park")
	// UnblockEnd: nothing will write to the session again before the drain
	// ends (parked, or its PR/branch is gone): end it on behalf.
	UnblockEnd = UnblockAction("end")
	// UnblockInvestigate: its state cannot be read; see the errors.
	UnblockInvestigate = UnblockAction("investigate")
)

// Unblock is the action that unblocks a blocking session, for a script
// (Action) and for a person (Detail).
type Unblock struct {
	Action UnblockAction `json:"action"`
	Detail string        `json:"detail"`
}

// HowToUnblock says what unblocks b, given the evidence sources the daemon
// has. The first matching rule wins: what only an operator can fix comes
// before what waits for an agent that may never come back.
func HowToUnblock(b DrainBlocker, ev EvidenceSources) Unblock {
	has := func(r BlockReason) bool { return slices.Contains(b.Reasons, r) }
	onlyUnverified := len(b.Reasons) == 1 && has(BlockUnverified)
	unresponsive := b.Live != nil && !*b.Live
	switch {
	case has(BlockUnknown):
		return Unblock{UnblockInvestigate, "its stored state or latest checkpoint cannot be read back: see checkpointd errors, then have the agent write a new checkpoint, or end the session"}
	case onlyUnverified && ev.None():
		return Unblock{UnblockConfigure, NoEvidenceNotice}
	case has(BlockInvalidated):
		return Unblock{UnblockEnd, "its pull request or branch is gone, so no checkpoint can become valid: end it (checkpointd sessions end " + b.SessionID + " --outcome abandoned --reason …)"}
	case onlyUnverified && ev.Forge:
		return Unblock{UnblockWaitEvidence, "drain complete asks the forge about it first; if it stays unverified, check the forge errors of the last reconcile"}
	case onlyUnverified:
		return Unblock{UnblockWaitEvidence, "waits for a webhook delivery about its branch or pull request (no forge is configured to ask)"}
	case b.Parked:
		return Unblock{UnblockEnd, "parked, so no run will write again before the drain ends: end it (checkpointd sessions end " + b.SessionID + " --outcome abandoned --reason …), or cancel the drain and let a new run take over"}
	case unresponsive:
		seen := "for longer than --run-liveness"
		if b.LastSeenAt != nil {
			seen = "since " + b.LastSeenAt.UTC().Format(time.RFC3339)
		}
		return Unblock{UnblockPark, "its run has not been heard from " + seen + ": park it (checkpointd sessions park " + b.SessionID + " --reason …), then end it if its latest checkpoint still blocks"}
	default:
		return Unblock{UnblockWrite, "its agent must write a complete checkpoint at the live head, naming only leases it holds; wait for it, or park the session if it does not come"}
	}
}
