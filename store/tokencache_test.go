package store_test

import (
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/migrations"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// revocationBound is the product's: a token revoked on another replica works
// for at most this long.
const revocationBound = time.Second

// newCachedToken creates an agent token on s, waits until s's cache is in
// use when it has one, and authenticates once so the cache holds it.
func newCachedToken(t *testing.T, s *store.Store, name string) (id, hash string, filled time.Time) {
	t.Helper()
	secret := checkpointd.NewTokenSecret()
	tok, err := s.CreateToken(t.Context(), checkpointd.TokenSpec{Name: name, Role: checkpointd.RoleAgent, Scope: []string{"acme/*"}}, checkpointd.HashToken(secret))
	if err != nil {
		t.Fatal(err)
	}
	hash = checkpointd.HashToken(secret)
	if s.Dialect() == migrations.Postgres {
		// The first Authenticate starts the listener.
		_, _ = s.Authenticate(t.Context(), hash)
		waitFor(t, "the token cache listens", func() bool { return store.TokenCacheListening(s) })
	}
	filled = time.Now()
	if p, err := s.Authenticate(t.Context(), hash); err != nil || p.TokenID != tok.ID {
		t.Fatalf("authenticate: %+v %v", p, err)
	}
	return tok.ID, hash, filled
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

// refusedWithin polls Authenticate until it refuses hash, and fails if a
// lookup that began after the bound still accepted it.
func refusedWithin(t *testing.T, s *store.Store, hash string, since time.Time, bound time.Duration) time.Duration {
	t.Helper()
	for {
		began := time.Now()
		_, err := s.Authenticate(t.Context(), hash)
		if errors.Is(err, checkpointd.ErrUnauthorized) {
			return began.Sub(since)
		}
		if err != nil {
			t.Fatalf("authenticate: %v", err)
		}
		if began.Sub(since) > bound {
			t.Fatalf("a revoked token still authenticates %v after its revocation (bound %v)", began.Sub(since), bound)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestTokenRevokedHereRefusedAtOnce: the store that revokes refuses the
// token at once, cache or not; so does a second store on SQLite (another
// process, as `checkpointd token revoke` is), which does not cache.
func TestTokenRevokedHereRefusedAtOnce(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		url := storetest.URL(t, b)
		s := storetest.OpenURL(t, url, checkpointd.SystemClock{})
		id, hash, _ := newCachedToken(t, s, "here")
		if err := s.RevokeToken(t.Context(), id); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Authenticate(t.Context(), hash); !errors.Is(err, checkpointd.ErrUnauthorized) {
			t.Errorf("right after RevokeToken on this store: %v, want ErrUnauthorized", err)
		}
		if b != storetest.SQLite {
			return
		}
		if store.TokenCacheListening(s) {
			t.Error("SQLite store caches authentication")
		}
		other := storetest.OpenURL(t, url, checkpointd.SystemClock{})
		id, hash, _ = newCachedToken(t, s, "elsewhere")
		if err := other.RevokeToken(t.Context(), id); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Authenticate(t.Context(), hash); !errors.Is(err, checkpointd.ErrUnauthorized) {
			t.Errorf("SQLite, right after a revoke through another store: %v, want ErrUnauthorized", err)
		}
	})
}

// TestTokenRevokedOnReplicaRefusedWithin1s: a revocation through another
// store on the same PostgreSQL reaches this store's cache by NOTIFY, well
// within the bound.
func TestTokenRevokedOnReplicaRefusedWithin1s(t *testing.T) {
	url := storetest.URL(t, storetest.Postgres)
	a := storetest.OpenURL(t, url, checkpointd.SystemClock{})
	b := storetest.OpenURL(t, url, checkpointd.SystemClock{})
	id, hash, _ := newCachedToken(t, a, "replica")
	if err := b.RevokeToken(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	took := refusedWithin(t, a, hash, time.Now(), revocationBound)
	// The TTL alone would take up to the whole bound: a refusal well before
	// it came from the NOTIFY.
	if took > revocationBound/2 {
		t.Errorf("refused on the other replica after %v: the NOTIFY did not drop the entry", took)
	}
}

// TestTokenCacheBoundWithoutNotify: a revocation whose NOTIFY never
// arrives (here: the row updated behind the store's back) still takes
// effect within the bound, and the cache was in use meanwhile.
func TestTokenCacheBoundWithoutNotify(t *testing.T) {
	url := storetest.URL(t, storetest.Postgres)
	s := storetest.OpenURL(t, url, checkpointd.SystemClock{})
	db, err := sql.Open("postgres", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	id, hash, filled := newCachedToken(t, s, "silent")
	revoked := time.Now()
	if _, err := db.Exec(`UPDATE api_tokens SET revoked_at = 1 WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	_, err = s.Authenticate(t.Context(), hash)
	if time.Since(filled) < revocationBound/2 && err != nil {
		t.Errorf("a cached token right after a silent revocation: %v, want it still served from the cache", err)
	}
	refusedWithin(t, s, hash, revoked, revocationBound)
}

// TestTokenCacheListenerCut: while the listener's connection is gone the
// cache is empty and bypassed, so a revocation it cannot hear of takes
// effect at once; once it listens again, the cache and NOTIFY work again.
func TestTokenCacheListenerCut(t *testing.T) {
	raw := storetest.URL(t, storetest.Postgres)
	storetest.OpenURL(t, raw, checkpointd.SystemClock{}) // migrates
	p := storetest.NewProxy(t, raw, "tokencache-a")
	a := storetest.OpenURL(t, p.URL, checkpointd.SystemClock{})
	other := storetest.OpenURL(t, raw, checkpointd.SystemClock{})
	db, err := sql.Open("postgres", raw)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	id, hash, _ := newCachedToken(t, a, "cut")

	// Cut only the listener: the pool's connections stay, so the store
	// itself still answers.
	var keep []int
	rows, err := db.Query(`SELECT client_port FROM pg_stat_activity WHERE application_name = 'tokencache-a' AND query NOT LIKE 'LISTEN%'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var port int
		if err := rows.Scan(&port); err != nil {
			t.Fatal(err)
		}
		keep = append(keep, port)
	}
	rows.Close()
	if len(keep) == 0 {
		t.Fatal("no pooled connection of the store to keep")
	}
	p.Cut(keep...)
	waitFor(t, "the cache is bypassed", func() bool { return !store.TokenCacheListening(a) })
	if _, err := db.Exec(`UPDATE api_tokens SET revoked_at = 1 WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(t.Context(), hash); !errors.Is(err, checkpointd.ErrUnauthorized) {
		t.Errorf("listener down, right after a revocation: %v, want ErrUnauthorized (cache bypassed)", err)
	}

	p.Restore()
	waitFor(t, "the cache listens again", func() bool { return store.TokenCacheListening(a) })
	id, hash, _ = newCachedToken(t, a, "after")
	if err := other.RevokeToken(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	refusedWithin(t, a, hash, time.Now(), revocationBound)
}
