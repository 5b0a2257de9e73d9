package store_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestRetentionOverlappingPasses: two replicas' passes run back to back,
// overlapping, while an agent writes and pushes change validity (events
// that refer to checkpoints) and events age out. No checkpoint that must
// stay goes (the latest N, every one a remaining event refers to), and one
// quiet pass afterwards leaves nothing it should have pruned.
func TestRetentionOverlappingPasses(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		clock := checkpointd.NewManualClock(t0)
		url := storetest.URL(t, b)
		s1, s2 := storetest.OpenURL(t, url, clock), storetest.OpenURL(t, url, clock)
		const keep = 2
		var sessions []*checkpointd.Session
		for i := range 6 {
			sessions = append(sessions, drainSession(t, s1, "acme/widgets", "author", fmt.Sprintf("fix-%d", i)))
		}
		p := store.Retention{KeepCheckpoints: keep, EventAge: 3 * time.Second, Batch: 3}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var mu sync.Mutex
		var errs []error
		for _, s := range []*store.Store{s1, s2} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if _, err := s.ApplyRetention(ctx, p); err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
					}
				}
			}()
		}
		heads := []string{headA, headB}
		for i := range 150 {
			sess := sessions[i%len(sessions)]
			if _, err := write(ctx, s1, sess.ID, drainDoc(sess, heads[(i/7)%2])); err != nil {
				t.Fatal(err)
			}
			if i%5 == 0 {
				if _, err := s2.Observe(ctx, []checkpointd.Observation{{Repo: sess.Repo, Branch: sess.Branch,
					Head: heads[(i/3)%2], Authoritative: true, Source: "test"}}); err != nil {
					t.Fatal(err)
				}
			}
			clock.Advance(100 * time.Millisecond)
			if i%10 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
		close(stop)
		wg.Wait()
		for _, err := range errs {
			t.Errorf("overlapping pass: %v", err)
		}
		check := func(when string, quiet bool) {
			for _, sess := range sessions {
				got, err := s1.GetSession(ctx, sess.ID)
				if err != nil {
					t.Fatal(err)
				}
				latest, kept, refs := got.Latest.Seq, keptSeqs(t, s1, sess.ID), referenced(t, s1, sess.ID)
				for seq := latest - keep + 1; seq <= latest; seq++ {
					if !slices.Contains(kept, seq) {
						t.Errorf("%s: %s lost latest-N checkpoint %d", when, sess.ID, seq)
					}
				}
				for _, r := range refs {
					if !slices.Contains(kept, r) {
						t.Errorf("%s: %s lost referenced checkpoint %d", when, sess.ID, r)
					}
				}
				for _, k := range kept {
					if quiet && k <= latest-keep && !slices.Contains(refs, k) {
						t.Errorf("%s: %s keeps unreferenced old checkpoint %d (kept %v refs %v latest %d)", when, sess.ID, k, kept, refs, latest)
					}
				}
			}
		}
		check("after the overlap", false)
		if _, err := s1.ApplyRetention(ctx, p); err != nil {
			t.Fatal(err)
		}
		check("after a quiet pass", true)
	})
}
