package checkpointd

import (
	"fmt"
	"time"
)

// PrefixReplica marks replica ids.
const PrefixReplica = "rep_"

// Replica is one daemon process serving the database, as it announced
// itself. Its id lives in its failed-write journal, so a
// replica restarted on the same data directory is the same replica.
type Replica struct {
	ID        string    `json:"id"`
	Host      string    `json:"host"`
	PID       int       `json:"pid"`
	Version   string    `json:"version"`
	StartedAt time.Time `json:"started_at"`
	// HeardAt is when it last wrote to its row (its own clock).
	HeardAt time.Time `json:"heard_at"`
	// Pending is how many failed checkpoint writes it kept, as of HeardAt,
	// that the store has not recorded yet.
	Pending int `json:"pending"`
	// Unknown says why what it keeps cannot be known (ReplicaJournalUnreadable),
	// until an operator's override clears it.
	Unknown ReplicaReason `json:"unknown,omitempty"`
	// Confirmed is the last confirmation request it answered: it then held
	// no failure the store had not recorded.
	Confirmed int64 `json:"-"`
}

// ReplicaReason says why a replica cannot vouch that it keeps no failed
// checkpoint write the store has not recorded.
type ReplicaReason string

// Reasons a replica blocks a drain completion.
const (
	// ReplicaNotConfirmed: it did not answer the completion's confirmation
	// request in time (stopped without leaving, or cannot reach the
	// database).
	ReplicaNotConfirmed = ReplicaReason("not_confirmed")
	// ReplicaJournalUnreadable: its journal could not be read at its start,
	// so what failed before cannot be known.
	ReplicaJournalUnreadable = ReplicaReason("journal_unreadable")
)

// UnconfirmedReplica is a replica a completion could not hear vouch for
// itself, and why.
type UnconfirmedReplica struct {
	Replica
	Reason ReplicaReason `json:"reason"`
	Detail string        `json:"detail"`
}

// ReplicaBlocks says whether r blocks a completion that asked every replica
// to confirm with request number request, and why. It fails closed: a
// replica that did not answer, or answered with failures still kept, or
// whose journal is unknown, blocks.
func ReplicaBlocks(r Replica, request int64) (UnconfirmedReplica, bool) {
	switch {
	case r.Unknown != "":
		return UnconfirmedReplica{Replica: r, Reason: r.Unknown,
			Detail: fmt.Sprintf("replica %s (host %s, pid %d) could not read its journal of failed checkpoint writes at its start %s: failures from before cannot be known",
				r.ID, r.Host, r.PID, r.StartedAt.UTC().Format(time.RFC3339))}, true
	case r.Confirmed < request:
		why := "it stopped without leaving, or cannot reach the database"
		if r.Pending > 0 {
			why = fmt.Sprintf("it last reported %d failed checkpoint writes waiting for the store", r.Pending)
		}
		return UnconfirmedReplica{Replica: r, Reason: ReplicaNotConfirmed,
			Detail: fmt.Sprintf("replica %s (host %s, pid %d) did not confirm that it keeps no unrecorded failed checkpoint write; last heard %s; %s: start it again on its data directory, or override it",
				r.ID, r.Host, r.PID, r.HeardAt.UTC().Format(time.RFC3339), why)}, true
	}
	return UnconfirmedReplica{}, false
}
