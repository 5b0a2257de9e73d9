package main

import (
	"strconv"

	"github.com/checkpointd/checkpointd"
)

// The fleet fields of a session summary, "" when there is no
// checkpoint to read them from.

// waitingOn is the latest checkpoint's blocker.waiting_on.
func waitingOn(s *checkpointd.Session) string {
	if s.Latest == nil {
		return ""
	}
	return s.Latest.WaitingOn
}

// nextActor is the latest checkpoint's next_action.actor.
func nextActor(s *checkpointd.Session) string {
	if s.Latest == nil {
		return ""
	}
	return s.Latest.NextActor
}

// leaseCount is how many leases the session holds now.
func leaseCount(s *checkpointd.Session) string { return strconv.Itoa(len(s.Leases)) }
