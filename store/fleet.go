package store

import (
	"context"

	"github.com/checkpointd/checkpointd"
)

// fleetCounts reads every fleet gauge in one statement: one snapshot on
// both engines, so the numbers agree with each other.
//   - validity and parked: session_counts, kept by triggers (migration
//     00031, 00036): 16 shards × validity × parked × drain_ready,
//     whatever the fleet's size;
//   - unresponsive: sessions_state_seen, the range of sightings up to
//     the cutoff, checking the rows in it: a run last seen before the
//     cutoff is live only by a checkpoint after it, and then only within
//     the refresh (a write moves run_seen_at when it lags by more; see
//     ListSessions). The range holds the unresponsive runs, the parked
//     sessions and those heard by a checkpoint only within the last
//     refresh: in a working fleet a few, where the live range it replaces
//     held every live session (62 ms at 100k on SQLite);
//   - leases: leases_held_expiry, the held leases not yet expired.
//
// Live is active - unresponsive - parked.
const fleetCounts = `
SELECT 'validity' AS part, validity AS name, parked, SUM(n) AS n FROM session_counts GROUP BY validity, parked
UNION ALL
SELECT 'unresponsive', '', FALSE, COUNT(*) FROM sessions
WHERE state = 'active' AND run_seen_at <= ? AND current_run_id <> '' AND (run_seen_at <= ? OR checkpoint_at <= ?)
UNION ALL
SELECT 'leases', '', FALSE, COUNT(*) FROM leases WHERE state = 'held' AND expires_at > ?`

// FleetCounts reads the fleet gauges: active sessions by validity and by
// liveness (live, unresponsive, parked) and held leases, judged at now
// against --run-liveness. Errors: ErrStoreUnavailable.
func (s *Store) FleetCounts(ctx context.Context) (*checkpointd.FleetCounts, error) {
	now, window := s.now(), s.liveness()
	cutoff := micros(now.Add(-window))
	var rows []struct {
		Part   string `db:"part"`
		Name   string `db:"name"`
		Parked bool   `db:"parked"`
		N      int64  `db:"n"`
	}
	if err := s.rdb.SelectContext(ctx, &rows, s.rdb.Rebind(fleetCounts),
		cutoff, micros(now.Add(-window-checkpointd.SeenRefresh(window))), cutoff, micros(now)); err != nil {
		return nil, s.classify(err)
	}
	out := &checkpointd.FleetCounts{Active: map[checkpointd.Validity]int64{}, ByLiveness: map[string]int64{}}
	for _, v := range checkpointd.Validities {
		out.Active[v] = 0
	}
	out.ByLiveness[checkpointd.LivenessParked] = 0
	var active int64
	for _, r := range rows {
		switch r.Part {
		case "validity":
			out.Active[checkpointd.Validity(r.Name)] += r.N
			active += r.N
			if r.Parked {
				out.ByLiveness[checkpointd.LivenessParked] += r.N
			}
		case "unresponsive":
			out.ByLiveness[checkpointd.LivenessUnresponsive] = r.N
		case "leases":
			out.LeasesHeld = r.N
		}
	}
	out.ByLiveness[checkpointd.LivenessLive] = max(active-out.ByLiveness[checkpointd.LivenessUnresponsive]-out.ByLiveness[checkpointd.LivenessParked], 0)
	return out, nil
}
