package store_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// replicaCount is how many stores (daemon replicas) share one PostgreSQL.
const replicaCount = 3

// TestReplicasShareInvariants: three replicas on one PostgreSQL, each
// hammered at once, keep every invariant DESIGN §12 puts in the database:
// one current run per session, consecutive checkpoint seqs with nothing
// lost, one effect per webhook delivery id, one winner per Idempotency-Key.
func TestReplicasShareInvariants(t *testing.T) {
	url := storetest.URL(t, storetest.Postgres)
	var replicas []*store.Store
	for range replicaCount {
		replicas = append(replicas, storetest.OpenURL(t, url, checkpointd.SystemClock{}))
	}
	ctx := t.Context()
	sess := drainSession(t, replicas[0], "acme/widgets", "author", "fix-r")
	const perReplica = 4

	// Concurrent takeovers through every replica: each one that succeeds
	// supersedes the one before; exactly one run is current at the end,
	// and it is the one with the highest fencing token.
	var mu sync.Mutex
	var runs []*checkpointd.Run
	var wg sync.WaitGroup
	for _, r := range replicas {
		for range perReplica {
			wg.Add(1)
			go func() {
				defer wg.Done()
				run, err := r.StartRun(ctx, sess.ID, store.NewRun{Takeover: true, Reason: "replica race", Agent: checkpointd.Agent{Runtime: "claude-code"}})
				if err != nil {
					t.Errorf("takeover: %v", err)
					return
				}
				mu.Lock()
				runs = append(runs, run)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	got, err := replicas[1].GetSession(ctx, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	tokens := map[int64]bool{}
	var newest *checkpointd.Run
	for _, r := range runs {
		if tokens[r.FencingToken] {
			t.Errorf("fencing token %d handed out twice", r.FencingToken)
		}
		tokens[r.FencingToken] = true
		if newest == nil || r.FencingToken > newest.FencingToken {
			newest = r
		}
	}
	if len(runs) != replicaCount*perReplica || got.CurrentRun == nil || got.CurrentRun.ID != newest.ID {
		t.Fatalf("%d takeovers; current run %+v, want the highest token's %+v", len(runs), got.CurrentRun, newest)
	}

	// Concurrent writes by the current run through every replica: distinct
	// consecutive seqs, every acknowledged one readable.
	sess = got
	var seqs []int64
	for _, r := range replicas {
		for range perReplica {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cp, err := write(ctx, r, sess.ID, drainDoc(sess, headA))
				if err != nil {
					t.Errorf("write: %v", err)
					return
				}
				mu.Lock()
				seqs = append(seqs, cp.Seq)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	slices.Sort(seqs)
	for i, seq := range seqs {
		if seq != int64(i+1) {
			t.Fatalf("seqs %v, want 1..%d", seqs, replicaCount*perReplica)
		}
		if _, err := replicas[i%replicaCount].GetCheckpoint(ctx, sess.ID, seq); err != nil {
			t.Errorf("acknowledged checkpoint %d: %v", seq, err)
		}
	}

	// One delivery id, delivered to every replica at once: one effect.
	var applied, duplicates int
	for _, r := range replicas {
		for range perReplica {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, dup, err := r.ApplyDelivery(ctx, store.DeliveryRecord{ID: "delivery-r", Event: "push", Forge: "gitea", Repo: "acme/widgets"},
					[]checkpointd.Observation{{Repo: "acme/widgets", Branch: "fix-r", Head: headB, Before: headA, Source: "webhook:delivery-r"}})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					t.Errorf("delivery: %v", err)
				case dup:
					duplicates++
				default:
					applied++
				}
			}()
		}
	}
	wg.Wait()
	if applied != 1 || duplicates != replicaCount*perReplica-1 {
		t.Errorf("one delivery through %d replicas: applied %d times, duplicate %d", replicaCount, applied, duplicates)
	}
	if n := len(eventsOf(t, replicas[2], sess.ID, checkpointd.EventValidity)); n != 1 {
		t.Errorf("%d validity.changed events from one delivery, want 1", n)
	}

	// One Idempotency-Key claimed through every replica at once: one claim
	// wins, every other request is told it is in flight.
	var claims, inFlight int
	for i, r := range replicas {
		for j := range perReplica {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, _, err := r.ClaimIdempotency(ctx, sess.ID, "key-r", "hmac-sha256:v1:00")
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil && c != "":
					claims++
				case errors.Is(err, checkpointd.ErrIdempotencyInFlight):
					inFlight++
				default:
					t.Errorf("claim %d/%d: %q, %v", i, j, c, err)
				}
			}()
		}
	}
	wg.Wait()
	if claims != 1 || inFlight != replicaCount*perReplica-1 {
		t.Errorf("one key through %d replicas: %d claims, %d in flight", replicaCount, claims, inFlight)
	}
}

// TestReplicasSettleConverge: pushes moving one branch back and forth
// through every replica at once, each replica settling as it goes, leave
// the session's verdict equal to the judgement of the last live head, and
// its log a chain of changes each starting where the one before ended: no
// replica commits an older judgement over a newer one. (A stress test: it
// shows the races it happens to hit; TestSettleReadsTheHeadAWriteCommits
// and TestWriteMovingToARefWaitsForItsDelivery pin the orderings.)
func TestReplicasSettleConverge(t *testing.T) {
	url := storetest.URL(t, storetest.Postgres)
	var replicas []*store.Store
	for range replicaCount {
		replicas = append(replicas, storetest.OpenURL(t, url, checkpointd.SystemClock{}))
	}
	ctx := t.Context()
	sess := drainSession(t, replicas[0], "acme/widgets", "author", "fix-s")
	if _, err := write(ctx, replicas[0], sess.ID, drainDoc(sess, headA)); err != nil {
		t.Fatal(err)
	}
	heads := []string{headA, headB}
	raw := openRaw(t, storetest.Postgres, url)
	var wg sync.WaitGroup
	for round := range 10 {
		for i, r := range replicas {
			for j := range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					id := fmt.Sprintf("push-%d-%d-%d", round, i, j)
					_, _, err := r.ApplyDelivery(ctx, store.DeliveryRecord{ID: id, Event: "push", Forge: "gitea", Repo: "acme/widgets"},
						[]checkpointd.Observation{{Repo: "acme/widgets", Branch: "fix-s", Head: heads[(i+j)%2], Source: "webhook:" + id}})
					if err == nil {
						err = r.Settle(ctx)
					}
					if err != nil {
						t.Errorf("delivery %s: %v", id, err)
					}
				}()
			}
		}
		wg.Wait()
		// Read raw: every delivery was followed by its own Settle, so
		// nothing may be pending, and a store read would settle first.
		var validity, live string
		var version, settled int64
		err := raw.QueryRowContext(ctx, `SELECT s.validity, l.head, l.version, l.settled_version FROM sessions s
JOIN live_refs l ON l.repo_key = s.repo_key AND l.ref = 'branch:' || s.branch WHERE s.id = $1`, sess.ID).Scan(&validity, &live, &version, &settled)
		if err != nil {
			t.Fatal(err)
		}
		want := checkpointd.ValidityStale
		if live == headA {
			want = checkpointd.ValidityValid
		}
		if version != settled || validity != string(want) {
			t.Fatalf("round %d: validity %q with the live head %s at version %d, settled at %d; want %q",
				round, validity, live[:7], version, settled, want)
		}
	}
	prev := ""
	for _, e := range eventsOf(t, replicas[1], sess.ID, checkpointd.EventValidity) {
		var d struct{ From, To string }
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Fatal(err)
		}
		if prev != "" && d.From != prev {
			t.Fatalf("event %d moves from %q, but the one before moved to %q", e.Seq, d.From, prev)
		}
		prev = d.To
	}
}
