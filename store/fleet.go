package store

import (
	"context"
	"fmt"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/migrations"
)

// fleetCounts reads every fleet gauge in one statement: one snapshot on
// both engines, so the numbers agree with each other. Each part reads an
// index, not the sessions table:
//   - validity: sessions_state_validity, the active range (an index-only
//     count on SQLite; on PostgreSQL as the visibility map allows);
//   - live: sessions_state_seen, the range of sightings after cutoff -
//     refresh (ListSessions says why it is sound), checking the rows in it;
//   - parked: sessions_parked, a partial index of the parked sessions;
//   - leases: leases_held_expiry, the held leases not yet expired.
//
// Unresponsive is active - live - parked. The cost still grows with the
// active sessions (a range of one index), so the collector caches it.
const fleetCounts = `
SELECT 'validity' AS part, validity AS name, COUNT(*) AS n FROM sessions WHERE state = 'active' GROUP BY validity
UNION ALL
SELECT 'live', '', COUNT(*) FROM sessions
WHERE state = 'active' AND run_seen_at > ? AND current_run_id <> '' AND (run_seen_at > ? OR checkpoint_at > ?)
UNION ALL
SELECT 'parked', '', COUNT(*) FROM %s WHERE state = 'active' AND current_run_id = ''
UNION ALL
SELECT 'leases', '', COUNT(*) FROM leases WHERE state = 'held' AND expires_at > ?`

// FleetCounts reads the fleet gauges: active sessions by validity and by
// liveness (live, unresponsive, parked) and held leases, judged at now
// against --run-liveness. Errors: ErrStoreUnavailable.
func (s *Store) FleetCounts(ctx context.Context) (*checkpointd.FleetCounts, error) {
	now, window := s.now(), s.liveness()
	cutoff := micros(now.Add(-window))
	var rows []struct {
		Part string `db:"part"`
		Name string `db:"name"`
		N    int64  `db:"n"`
	}
	// SQLite's planner prefers the equality on state over the partial
	// index of parked sessions (as with the drain's, drain.go): tell it.
	parked := "sessions"
	if s.dialect == migrations.SQLite {
		parked = "sessions INDEXED BY sessions_parked"
	}
	if err := s.rdb.SelectContext(ctx, &rows, s.rdb.Rebind(fmt.Sprintf(fleetCounts, parked)),
		micros(now.Add(-window-checkpointd.SeenRefresh(window))), cutoff, cutoff, micros(now)); err != nil {
		return nil, s.classify(err)
	}
	out := &checkpointd.FleetCounts{Active: map[checkpointd.Validity]int64{}, ByLiveness: map[string]int64{}}
	for _, v := range checkpointd.Validities {
		out.Active[v] = 0
	}
	var active int64
	for _, r := range rows {
		switch r.Part {
		case "validity":
			out.Active[checkpointd.Validity(r.Name)] += r.N
			active += r.N
		case "live":
			out.ByLiveness[checkpointd.LivenessLive] = r.N
		case "parked":
			out.ByLiveness[checkpointd.LivenessParked] = r.N
		case "leases":
			out.LeasesHeld = r.N
		}
	}
	out.ByLiveness[checkpointd.LivenessUnresponsive] = max(active-out.ByLiveness[checkpointd.LivenessLive]-out.ByLiveness[checkpointd.LivenessParked], 0)
	return out, nil
}
