package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
)

// TestPrintDrainStatusTimes: a drain is shown with the time of what it is
// in now — running since its start, completed at its decision, cancelled
// at its end, lifted at its lift — never an ended drain "since" its start.
func TestPrintDrainStatusTimes(t *testing.T) {
	start := time.Date(2026, 3, 1, 7, 55, 37, 0, time.UTC)
	ended := start.Add(19 * time.Second)
	lifted := start.Add(2 * time.Minute)
	now := start.Add(5 * time.Minute)
	at := func(t time.Time) string { return stamp(t, time.UTC) }
	counts := &checkpointd.DrainCounts{Active: 1, Ready: 1}
	for _, tc := range []struct {
		name     string
		st       drainStatus
		want     []string
		unwanted []string
	}{
		{"running", drainStatus{Drain: &checkpointd.Drain{ID: "drn_1", Reason: "deploy", State: checkpointd.DrainRunning,
			StartedAt: start, Gating: true}, Draining: true, Counts: counts},
			[]string{"running since " + at(start) + " (5m0s)", "deploy"}, nil},
		{"cancelled", drainStatus{Drain: &checkpointd.Drain{ID: "drn_1", Reason: "deploy", State: checkpointd.DrainCancelled,
			StartedAt: start, EndedAt: &ended, LiftedAt: &ended}},
			[]string{"cancelled at " + at(ended) + " (4m41s ago;", "started " + at(start) + ", ran 19s", "not draining"},
			[]string{"since"}},
		{"completed, gating", drainStatus{Drain: &checkpointd.Drain{ID: "drn_1", Reason: "deploy", State: checkpointd.DrainCompleted,
			StartedAt: start, EndedAt: &ended, Gating: true}, Draining: true, Counts: counts},
			[]string{"completed at " + at(ended) + " (4m41s ago;", "started " + at(start) + ", ran 19s", "safe to stop"},
			[]string{"since"}},
		{"completed, lifted", drainStatus{Drain: &checkpointd.Drain{ID: "drn_1", Reason: "deploy", State: checkpointd.DrainCompleted,
			StartedAt: start, EndedAt: &ended, LiftedAt: &lifted}},
			[]string{"completed at " + at(ended), "lifted at " + at(lifted) + " (3m0s ago)", "not draining"},
			[]string{"since"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			printDrainStatus(&out, &tc.st, now)
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("missing %q in:\n%s", w, out.String())
				}
			}
			for _, w := range tc.unwanted {
				if strings.Contains(out.String(), w) {
					t.Errorf("unwanted %q in:\n%s", w, out.String())
				}
			}
		})
	}
}
