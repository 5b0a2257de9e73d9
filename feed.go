package checkpointd

import "sort"

// EventRunUnresponsive is recorded once per run when it crosses the
// --run-liveness window unheard: reported, never acted on.
const EventRunUnresponsive = "run.unresponsive"

// Change feed (GET /v1/watch) event types: the SSE "event:" field.
const (
	FeedValidity   = "validity"
	FeedLease      = "lease"
	FeedRun        = "run"
	FeedCheckpoint = "checkpoint"
	FeedSession    = "session"
	FeedDrain      = "drain"
	// FeedReset tells a client its Last-Event-ID could not be resumed from;
	// the current state follows (docs/watch.md).
	FeedReset = "reset"
)

// FeedKind is what an event log kind is on the change feed: its type and,
// for the types that have one, its change.
type FeedKind struct {
	Type   string
	Change string
}

// feedKinds is the one table of which log events the change feed carries.
// Everything else in the log (lease renewals, drain notes per session,
// write failures) is audit, not a change a watcher acts on. A lease that is
// lost shows as the validity event to lease_lost that follows its lease
// event. The drain's life cycle is not per session: it comes from the
// drain_feed table (DrainFeedKind), once per drain.
var feedKinds = map[string]FeedKind{
	EventValidity:          {FeedValidity, ""},
	EventLeaseAcquired:     {FeedLease, "acquired"},
	EventLeaseReleased:     {FeedLease, "released"},
	EventLeaseExpired:      {FeedLease, "expired"},
	EventLeaseMoved:        {FeedLease, "moved"},
	EventRunStarted:        {FeedRun, "started"},
	EventRunSuperseded:     {FeedRun, "superseded"},
	EventRunParked:         {FeedRun, "parked"},
	EventRunUnparked:       {FeedRun, "unparked"},
	EventRunUnresponsive:   {FeedRun, "unresponsive"},
	EventCheckpointWritten: {FeedCheckpoint, ""},
	EventSessionCreated:    {FeedSession, "created"},
	EventSessionEnded:      {FeedSession, "ended"},
}

// FeedKindOf returns the feed type of an event log kind; false for a kind
// the feed does not carry.
func FeedKindOf(logKind string) (FeedKind, bool) {
	k, ok := feedKinds[logKind]
	return k, ok
}

// FeedLogKinds returns the event log kinds the feed carries, sorted.
func FeedLogKinds() []string {
	out := make([]string, 0, len(feedKinds))
	for k := range feedKinds {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// DrainFeedKind is the feed type of a drain's change: started, completed
// or cancelled.
func DrainFeedKind(change string) FeedKind { return FeedKind{FeedDrain, change} }
