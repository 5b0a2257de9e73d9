package store_test

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// idem is the idempotency of a write under claim.
func idem(scope, key, claim string) *store.Idempotency {
	return &store.Idempotency{Scope: scope, Key: key, Claim: claim, Status: 201,
		Render: func(any) ([]byte, error) { return []byte(`{"written":true}` + "\n"), nil }}
}

func claimKey(t *testing.T, s *store.Store, scope, key string) string {
	t.Helper()
	claim, replay, err := s.ClaimIdempotency(t.Context(), scope, key, "hmac-sha256:v1:d")
	if err != nil || replay != nil {
		t.Fatalf("claim %s: %v (replay %v), want the key", key, err, replay)
	}
	return claim
}

func writeClaimed(ctx context.Context, s *store.Store, sess *checkpointd.Session, key, claim string) error {
	_, err := s.WriteCheckpoint(ctx, store.CheckpointWrite{SessionID: sess.ID, Doc: drainDoc(sess, headA),
		Digest: "hmac-sha256:v1:d", Idempotency: idem(sess.ID, key, claim)})
	return err
}

// withApp names the store's sessions on the server (application_name).
func withApp(t *testing.T, raw, app string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	return u.String()
}

// claimEventually retries a claim of key until it is no longer in flight, for up
// to bound, and returns how long that took.
func claimEventually(t *testing.T, s *store.Store, scope, key string, bound time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		_, _, err := s.ClaimIdempotency(t.Context(), scope, key, "hmac-sha256:v1:d")
		if err == nil {
			return time.Since(start)
		}
		if !errors.Is(err, checkpointd.ErrIdempotencyInFlight) {
			t.Fatalf("retry of %s: %v", key, err)
		}
		if time.Since(start) > bound {
			t.Fatalf("retry of %s still idempotency_in_flight after %v: %v", key, bound, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestIdempotencyClaimOfAnEndedRequestIsFree: a claim whose request ended
// without its release reaching the store (the release failed) does not
// block the retry, while a claim whose request is still processing does;
// the first request's late release then changes nothing.
func TestIdempotencyClaimOfAnEndedRequestIsFree(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		s := storetest.Open(t, b, checkpointd.SystemClock{})
		sess := drainSession(t, s, "acme/widgets", "author", "fix-12")
		first := claimKey(t, s, sess.ID, "k")
		if _, _, err := s.ClaimIdempotency(ctx, sess.ID, "k", "hmac-sha256:v1:d"); !errors.Is(err, checkpointd.ErrIdempotencyInFlight) {
			t.Fatalf("a retry while the first request processes: %v, want ErrIdempotencyInFlight", err)
		}
		superseded := drainDoc(sess, headA)
		superseded.FencingToken += 5
		if _, err := s.WriteCheckpoint(ctx, store.CheckpointWrite{SessionID: sess.ID, Doc: superseded, Digest: "hmac-sha256:v1:d",
			Idempotency: idem(sess.ID, "k", first)}); !errors.Is(err, checkpointd.ErrRunSuperseded) {
			t.Fatalf("write by a superseded token: %v", err)
		}
		// The request failed and its release never reached the store.
		second := claimKey(t, s, sess.ID, "k")
		if err := writeClaimed(ctx, s, sess, "k", second); err != nil {
			t.Fatal(err)
		}
		if err := s.ReleaseIdempotency(ctx, sess.ID, "k", first); err != nil {
			t.Fatalf("the first request's late release: %v", err)
		}
		_, replay, err := s.ClaimIdempotency(ctx, sess.ID, "k", "hmac-sha256:v1:d")
		if err != nil || replay == nil || string(replay.Body) != `{"written":true}`+"\n" {
			t.Fatalf("after the retry completed: replay %+v, %v", replay, err)
		}
	})
}

// TestIdempotencyClaimsOfAPreviousProcessAreFree: SQLite has one daemon
// per file, so a claim a previous process left behind (it crashed, or
// stopped between claim and release) is free when the next one starts.
func TestIdempotencyClaimsOfAPreviousProcessAreFree(t *testing.T) {
	path := storetest.URL(t, storetest.SQLite)
	before := storetest.OpenURL(t, path, checkpointd.SystemClock{})
	sess := drainSession(t, before, "acme/widgets", "author", "fix-12")
	claimKey(t, before, sess.ID, "k")
	if err := before.Close(); err != nil {
		t.Fatal(err)
	}
	after := storetest.OpenURL(t, path, checkpointd.SystemClock{})
	claim := claimKey(t, after, sess.ID, "k")
	if err := writeClaimed(t.Context(), after, sess, "k", claim); err != nil {
		t.Fatal(err)
	}
}

// TestIdempotencyClaimOfACrashedReplica: a replica that dies holding a
// claim (its connections go with it, nothing is released) does not block
// the retry on another replica: it runs as soon as PostgreSQL has ended
// the dead replica's session, not after the claim TTL.
func TestIdempotencyClaimOfACrashedReplica(t *testing.T) {
	raw := storetest.URL(t, storetest.Postgres)
	p := storetest.NewProxy(t, raw, "replica-a")
	a := storetest.OpenURL(t, p.URL, checkpointd.SystemClock{})
	b := storetest.OpenURL(t, raw, checkpointd.SystemClock{})
	sess := drainSession(t, b, "acme/widgets", "author", "fix-12")
	claimKey(t, a, sess.ID, "k")
	if _, _, err := b.ClaimIdempotency(t.Context(), sess.ID, "k", "hmac-sha256:v1:d"); !errors.Is(err, checkpointd.ErrIdempotencyInFlight) {
		t.Fatalf("retry on another replica while the holder lives: %v, want ErrIdempotencyInFlight", err)
	}
	p.Cut() // replica A dies
	took := claimEventually(t, b, sess.ID, "k", 5*time.Second)
	t.Logf("the retry ran %v after the holder died", took)
}

// lockPorts are the client ports of app's sessions that hold an advisory
// lock: what a replica keeps while it is alive.
func lockPorts(t *testing.T, db *sql.DB, app string) []int {
	t.Helper()
	var ports []int
	rows, err := db.QueryContext(t.Context(), `SELECT a.client_port FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = $1`, app)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var p int
		if err := rows.Scan(&p); err != nil {
			t.Fatal(err)
		}
		ports = append(ports, p)
	}
	return ports
}

// serverLetGo waits until the server has ended every session of app, as it
// does a moment after their connections closed.
func serverLetGo(t *testing.T, db *sql.DB, app string) {
	t.Helper()
	for start := time.Now(); ; time.Sleep(5 * time.Millisecond) {
		var n int
		if err := db.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Since(start) > 5*time.Second {
			t.Fatalf("the server still has %d sessions of %s", n, app)
		}
	}
}

// TestIdempotencyReleaseFailsWhileTheStoreIsDown: a write and then its
// release fail because the store cannot be reached; once it is back, the
// retry runs at once — on another replica and on the same one — instead of
// answering idempotency_in_flight for the claim TTL, and a claim nobody
// retries is released by its replica.
func TestIdempotencyReleaseFailsWhileTheStoreIsDown(t *testing.T) {
	failBoth := func(t *testing.T, a *store.Store, sess *checkpointd.Session, claims map[string]string) {
		t.Helper()
		for key, claim := range claims {
			if err := writeClaimed(t.Context(), a, sess, key, claim); !errors.Is(err, checkpointd.ErrStoreUnavailable) {
				t.Fatalf("write while the store is away: %v, want ErrStoreUnavailable", err)
			}
			if err := a.ReleaseIdempotency(t.Context(), sess.ID, key, claim); !errors.Is(err, checkpointd.ErrStoreUnavailable) {
				t.Fatalf("release while the store is away: %v, want ErrStoreUnavailable", err)
			}
		}
	}
	setup := func(t *testing.T) (p *storetest.Proxy, a, b *store.Store, db *sql.DB, sess *checkpointd.Session) {
		raw := storetest.URL(t, storetest.Postgres)
		p = storetest.NewProxy(t, raw, "replica-a")
		a = storetest.OpenURL(t, p.URL, checkpointd.SystemClock{})
		b = storetest.OpenURL(t, raw, checkpointd.SystemClock{})
		return p, a, b, openRaw(t, storetest.Postgres, raw), drainSession(t, b, "acme/widgets", "author", "fix-12")
	}
	gone := func(t *testing.T, db *sql.DB, scope, key string, bound time.Duration) {
		t.Helper()
		for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
			var n int
			if err := db.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM idempotency WHERE scope = $1 AND idem_key = $2`, scope, key).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				return
			}
			if time.Since(start) > bound {
				t.Fatalf("the claim of %s nobody retried is still stored after %v", key, bound)
			}
		}
	}

	t.Run("its connections lost", func(t *testing.T) {
		p, a, b, db, sess := setup(t)
		claims := map[string]string{}
		for _, k := range []string{"elsewhere", "here", "nobody"} {
			claims[k] = claimKey(t, a, sess.ID, k)
		}
		p.Cut()
		failBoth(t, a, sess, claims)
		serverLetGo(t, db, "replica-a")
		p.Restore()
		if _, _, err := b.ClaimIdempotency(t.Context(), sess.ID, "elsewhere", "hmac-sha256:v1:d"); err != nil {
			t.Errorf("retry on another replica once the store is back: %v", err)
		}
		if _, _, err := a.ClaimIdempotency(t.Context(), sess.ID, "here", "hmac-sha256:v1:d"); err != nil {
			t.Errorf("retry on the same replica once the store is back: %v", err)
		}
		gone(t, db, sess.ID, "nobody", 3*time.Second)
	})

	// Only the replica's requests lose the store; what keeps it alive on
	// the server does not: its failed releases are made as soon as the
	// store answers again, within releaseRetry (1 s) when nothing else
	// reaches it first.
	t.Run("its liveness kept", func(t *testing.T) {
		p, a, b, db, sess := setup(t)
		claims := map[string]string{}
		for _, k := range []string{"elsewhere", "here", "nobody"} {
			claims[k] = claimKey(t, a, sess.ID, k)
		}
		p.Cut(lockPorts(t, db, "replica-a")...)
		failBoth(t, a, sess, claims)
		// Replica A still shows alive: its claims are not free for B yet.
		if _, _, err := b.ClaimIdempotency(t.Context(), sess.ID, "elsewhere", "hmac-sha256:v1:d"); !errors.Is(err, checkpointd.ErrIdempotencyInFlight) {
			t.Fatalf("retry on another replica while A lives apart from the store: %v, want ErrIdempotencyInFlight", err)
		}
		p.Restore()
		took := claimEventually(t, b, sess.ID, "elsewhere", 2500*time.Millisecond)
		t.Logf("the retry on another replica ran %v after the store came back", took)
		if _, _, err := a.ClaimIdempotency(t.Context(), sess.ID, "here", "hmac-sha256:v1:d"); err != nil {
			t.Errorf("retry on the same replica once the store is back: %v", err)
		}
		gone(t, db, sess.ID, "nobody", 3*time.Second)
	})
}

// TestIdempotencyLiveHolderStaysInFlight: whatever frees abandoned claims
// never frees one whose request is still processing. Replicas racing for a
// fresh key leave one holder; while its write waits on a lock, every retry
// on either replica is in flight; then every retry replays its answer. A
// live holder's claim older than the TTL is taken over, and the holder's
// late write is refused.
func TestIdempotencyLiveHolderStaysInFlight(t *testing.T) {
	raw := storetest.URL(t, storetest.Postgres)
	clock := checkpointd.NewManualClock(t0)
	replicas := []*store.Store{storetest.OpenURL(t, withApp(t, raw, "replica-a"), clock), storetest.OpenURL(t, withApp(t, raw, "replica-b"), clock)}
	db := openRaw(t, storetest.Postgres, raw)
	sess := drainSession(t, replicas[0], "acme/widgets", "author", "fix-12")
	ctx := t.Context()

	// race claims key from every replica at once and returns the claims won.
	type won struct {
		s     *store.Store
		claim string
	}
	race := func(key string) (wins []won, replays int) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, s := range replicas {
			for range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					claim, replay, err := s.ClaimIdempotency(ctx, sess.ID, key, "hmac-sha256:v1:d")
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil && replay != nil:
						replays++
					case err == nil:
						wins = append(wins, won{s, claim})
					case !errors.Is(err, checkpointd.ErrIdempotencyInFlight):
						t.Errorf("claim %s: %v", key, err)
					}
				}()
			}
		}
		wg.Wait()
		return wins, replays
	}

	wins, _ := race("fresh")
	if len(wins) != 1 {
		t.Fatalf("%d claims of one key won, want 1", len(wins))
	}
	holder := wins[0]
	hold := holding(t, raw, `SELECT 1 FROM sessions WHERE id = $1 FOR UPDATE`, sess.ID)
	done := make(chan error, 1)
	go func() { done <- writeClaimed(ctx, holder.s, sess, "fresh", holder.claim) }()
	for start := time.Now(); ; time.Sleep(5 * time.Millisecond) {
		var waiting int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM pg_stat_activity WHERE application_name IN ('replica-a', 'replica-b') AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("the holder's write never waited on the session lock")
		}
	}
	if wins, replays := race("fresh"); len(wins) != 0 || replays != 0 {
		t.Fatalf("while the holder's write is in flight: %d claims won, %d replays; want every retry in flight", len(wins), replays)
	}
	if err := hold.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the holder's write: %v", err)
	}
	if wins, replays := race("fresh"); len(wins) != 0 || replays != 12 {
		t.Fatalf("after the holder's write: %d claims won, %d replays; want 12 replays", len(wins), replays)
	}

	// The TTL still bounds a live holder that takes too long.
	slow := claimKey(t, replicas[0], sess.ID, "slow")
	clock.Advance(store.IdempotencyClaimTTL)
	claimKey(t, replicas[1], sess.ID, "slow")
	if err := writeClaimed(ctx, replicas[0], sess, "slow", slow); !errors.Is(err, checkpointd.ErrIdempotencyInFlight) {
		t.Fatalf("the overtaken holder's write: %v, want ErrIdempotencyInFlight", err)
	}
}
