package store_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// replicaCount is how many stores (daemon replicas) share one PostgreSQL.
const replicaCount = 3

// TestReplicasShareInvariants: three replicas on one PostgreSQL, each
// hammered at once, keep every invariant the database holds:
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
				runs = append(runs, run.Run)
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
	if err := replicas[2].Settled(ctx); err != nil {
		t.Fatal(err)
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

// TestReplicasConcurrentTakeoversNeverUnavailable: 60 takeovers of one
// session holding leases, at once through three replicas, while operators
// park it and heartbeats and lease renewals of whichever run is current
// come in: every call answers what happened to it (a run, or the fencing
// refusal a superseded run gets), never store_unavailable — lock
// conflicts, serialization failures and deadlocks under contention are not
// an outage.
func TestReplicasConcurrentTakeoversNeverUnavailable(t *testing.T) {
	url := storetest.URL(t, storetest.Postgres)
	var replicas []*store.Store
	for range replicaCount {
		replicas = append(replicas, storetest.OpenURL(t, url, checkpointd.SystemClock{}))
	}
	ctx := t.Context()
	sess := drainSession(t, replicas[0], "acme/widgets", "author", "fix-t")
	for _, res := range []checkpointd.Resource{{Kind: checkpointd.ResourceIssue, Repo: "acme/widgets", Number: 1},
		{Kind: checkpointd.ResourceBranch, Repo: "acme/widgets", Branch: "fix-t"}} {
		if _, err := replicas[0].AcquireLease(ctx, store.NewLease{Resource: res, SessionID: sess.ID, RunID: sess.CurrentRun.ID, TTL: leaseTTL}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var unavailable []error
	note := func(err error) {
		if errors.Is(err, checkpointd.ErrStoreUnavailable) {
			mu.Lock()
			unavailable = append(unavailable, err)
			mu.Unlock()
		}
	}
	for i := range 60 {
		r := replicas[i%replicaCount]
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := r.StartRun(ctx, sess.ID, store.NewRun{Takeover: true, Reason: "claim", Agent: checkpointd.Agent{Runtime: "claude-code"}})
			note(err)
			if i%10 == 0 {
				_, err = r.ParkSession(ctx, sess.ID, store.Operator{TokenID: "tok_op"}, "park", nil)
				note(err)
			}
		}()
	}
	wg.Wait()
	if len(unavailable) > 0 {
		t.Fatalf("%d of the calls answered store_unavailable; first: %v", len(unavailable), unavailable[0])
	}
}

// TestWriteAfterServerEndedConnections: after the server ended every
// connection of the pool (a restart, a failover, an operator's
// pg_terminate_backend), the next writes succeed on fresh connections
// instead of answering store_unavailable once per dead pooled connection —
// the checkpoint writes' own connection included.
func TestWriteAfterServerEndedConnections(t *testing.T) {
	db := storetest.NewDatabase(t)
	s := storetest.OpenURL(t, db.URL, checkpointd.SystemClock{})
	ctx := t.Context()
	// Fill the pool: concurrent writes each hold a connection.
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() { defer wg.Done(); drainSession(t, s, "acme/widgets", "author", "fix-p") }()
	}
	wg.Wait()
	// And the checkpoint writes' own connection, on their fast path.
	sess := drainSession(t, s, "acme/widgets", "author", "fix-q")
	for i := range 3 {
		if _, err := s.WriteCheckpoint(ctx, store.CheckpointWrite{SessionID: sess.ID, Doc: drainDoc(sess, head(i))}); err != nil {
			t.Fatal(err)
		}
	}
	db.Refuse()
	// The store meets the outage (a serving replica's workers always do):
	// the connections it held are checked before they are used again.
	if err := s.Ping(ctx); err == nil {
		t.Fatal("the store answers while the database refuses connections")
	}
	db.Allow()
	for i := range 8 {
		if _, err := s.CreateSession(ctx, store.NewSession{Repo: "acme/widgets", Role: "author", Issue: int64(i + 1),
			Agent: checkpointd.Agent{Runtime: "claude-code"}}); err != nil {
			t.Fatalf("write %d after the server ended the pool's connections: %v", i, err)
		}
		if _, err := s.WriteCheckpoint(ctx, store.CheckpointWrite{SessionID: sess.ID, Doc: drainDoc(sess, head(i))}); err != nil {
			t.Fatalf("checkpoint %d after the server ended the pool's connections: %v", i, err)
		}
	}
}

// TestCheckpointWriteAfterBackendsEndedQuietly: the server ends the
// store's connections while it is idle and the store meets no failure of
// its own (a replica that served nothing during an outage). Its next
// checkpoint writes must land: the listener that lost its connection
// tells the batch connection to check itself, and so does an idle second
// (first, before any listener runs).
func TestCheckpointWriteAfterBackendsEndedQuietly(t *testing.T) {
	db := storetest.NewDatabase(t)
	s := storetest.OpenURL(t, db.URL, checkpointd.SystemClock{})
	ctx := t.Context()
	sess := drainSession(t, s, "acme/widgets", "author", "fix-q")
	write := func(i int) error {
		_, err := s.WriteCheckpoint(ctx, store.CheckpointWrite{SessionID: sess.ID, Doc: drainDoc(sess, head(i))})
		return err
	}
	t.Run("an idle connection is checked", func(t *testing.T) {
		if err := write(10); err != nil {
			t.Fatal(err)
		}
		db.Refuse()
		db.Allow()
		time.Sleep(1100 * time.Millisecond) // past batchConnIdle, no listener yet
		if err := write(11); err != nil {
			t.Fatalf("checkpoint after an idle second: %v", err)
		}
	})
	t.Run("the listener hears it", func(t *testing.T) {
		newCachedToken(t, s, "listener") // starts the revocation listener
		if err := write(0); err != nil {
			t.Fatal(err)
		}
		db.Refuse()
		waitFor(t, "the listener hears its connection end", func() bool { return !store.TokenCacheListening(s) })
		db.Allow()
		for i := 1; i <= 3; i++ {
			if err := write(i); err != nil {
				t.Fatalf("checkpoint %d right after the server ended the store's connections: %v", i, err)
			}
		}
	})
}

// head is a distinct 40-hex head for i.
func head(i int) string { return fmt.Sprintf("%040x", i+1) }
