package main

import (
	"strconv"

	"github.com/checkpointd/checkpointd"
)

// The fleet fields of a session summary (DESIGN §6). Until they land in
// checkpointd.Session these read nothing.

// waitingOn is the latest checkpoint's blocker.waiting_on.
func waitingOn(s *checkpointd.Session) string { return "" }

// nextActor is the latest checkpoint's next_action.actor.
func nextActor(s *checkpointd.Session) string { return "" }

// leaseCount is how many leases the session holds.
func leaseCount(s *checkpointd.Session) string { return strconv.Itoa(0) }
