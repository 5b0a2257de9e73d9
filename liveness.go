package checkpointd

import "time"

// DefaultRunLiveness is how long a run may stay unheard before it reads as
// unresponsive (--run-liveness).
const DefaultRunLiveness = 10 * time.Minute

// EventRunParked is recorded when an operator parks a session: its current
// run is superseded and no run replaces it.
const EventRunParked = "run.parked"

// EventRunUnparked is recorded, with the parked run's id, when the next run
// of a parked session starts.
const EventRunUnparked = "run.unparked"

// RunLive reports whether a run last heard from at lastSeen is still live at
// now: heard from within window. Liveness is reported, never acted on.
func RunLive(lastSeen, now time.Time, window time.Duration) bool {
	return now.Sub(lastSeen) < window
}

// SeenRefresh is how far a run's last_seen_at may lag the truth before a
// call that would not write anyway records a new sighting: a tenth of the
// liveness window, so a run that calls every second costs one write per
// window/10, and reads as live no later than window/10 too late.
func SeenRefresh(window time.Duration) time.Duration { return window / 10 }

// Liveness of an active session for the fleet gauges: its current run is
// live or unresponsive, or it is parked (no current run).
const (
	LivenessLive         = "live"
	LivenessUnresponsive = "unresponsive"
	LivenessParked       = "parked"
)

// FleetCounts are the fleet gauges, read from the database in
// one statement so every replica reports the same numbers.
type FleetCounts struct {
	// Active counts active sessions by validity; every validity is present.
	Active map[Validity]int64
	// ByLiveness counts active sessions by LivenessLive, LivenessUnresponsive
	// and LivenessParked; every one is present.
	ByLiveness map[string]int64
	// LeasesHeld counts leases held and not past expires_at.
	LeasesHeld int64
}

// Validities lists every validity value, in a fixed order.
var Validities = []Validity{ValidityValid, ValidityStale, ValidityLeaseLost, ValidityInvalidated, ValidityUnverified}
