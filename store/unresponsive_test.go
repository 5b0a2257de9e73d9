package store_test

import (
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestMarkUnresponsive: a run unheard for the liveness window gets one
// run.unresponsive event, once per run, and the feed carries it; a run
// heard from recently gets none; a takeover's new run is judged afresh.
func TestMarkUnresponsive(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		clock := checkpointd.NewManualClock(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
		s := storetest.Open(t, b, clock)
		s.SetRunLiveness(10 * time.Minute)
		ctx := t.Context()
		quiet := drainSession(t, s, "acme/widgets", "author", "fix-quiet")
		busy := drainSession(t, s, "acme/widgets", "author", "fix-busy")
		start, err := s.FeedHead(ctx)
		if err != nil {
			t.Fatal(err)
		}
		mark := func(want int) {
			t.Helper()
			if n, err := s.MarkUnresponsive(ctx); err != nil || n != want {
				t.Fatalf("MarkUnresponsive = %d, %v; want %d", n, err, want)
			}
		}
		clock.Advance(9 * time.Minute)
		mark(0)
		if _, err := s.SeeRun(ctx, busy.ID, busy.CurrentRun.ID); err != nil {
			t.Fatal(err)
		}
		clock.Advance(2 * time.Minute)
		mark(1) // quiet: 11 min unheard; busy: 2 min
		mark(0) // once per run
		if _, err := s.SeeRun(ctx, quiet.ID, quiet.CurrentRun.ID); err != nil {
			t.Fatal(err)
		}
		clock.Advance(11 * time.Minute)
		mark(1) // busy now; quiet's run was reported already
		if _, err := s.StartRun(ctx, quiet.ID, store.NewRun{Takeover: true, Reason: "crash", Agent: checkpointd.Agent{Runtime: "claude-code"}}); err != nil {
			t.Fatal(err)
		}
		clock.Advance(11 * time.Minute)
		mark(1) // the new run of quiet

		evs, _ := readAll(t, s, start, 100)
		var got []string
		for _, e := range evs {
			if e.Kind == checkpointd.EventRunUnresponsive {
				got = append(got, e.SessionID)
			}
		}
		if len(got) != 3 || got[0] != quiet.ID || got[1] != busy.ID || got[2] != quiet.ID {
			t.Fatalf("unresponsive events for %v, want quiet, busy, quiet", got)
		}
	})
}
