package api_test

import (
	"strings"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestWatchEndsWhenTheTokenIsRevoked: an open stream authenticates its
// token again while it lasts; once the token is revoked it gets an error
// event within about a second and ends, and a change after the revocation
// never reaches it.
func TestWatchEndsWhenTheTokenIsRevoked(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		s := storetest.Open(t, b, checkpointd.SystemClock{})
		w := newWatchServer(t, s, nil)
		secret := w.token(checkpointd.RoleReader, nil)
		st := w.watch(secret, "", "")
		toks, err := s.ListTokens(t.Context(), "", 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, tok := range toks {
			if tok.Role == checkpointd.RoleReader && tok.RevokedAt == nil {
				if err := s.RevokeToken(t.Context(), tok.ID); err != nil {
					t.Fatal(err)
				}
			}
		}
		revoked := time.Now()
		e, ok := st.next(5 * time.Second)
		if !ok || e.Type != "error" || !strings.Contains(e.Data, "unauthorized") {
			t.Fatalf("after the revocation: %+v %v, want an unauthorized error event", e, ok)
		}
		if d := time.Since(revoked); d > 2500*time.Millisecond {
			t.Errorf("the stream ended %v after the revocation", d)
		}
		w.opSession("acme/widgets", "after-revoke")
		if e, ok := st.next(2 * time.Second); ok {
			t.Errorf("an event after the revocation reached the revoked token: %+v", e)
		}
	})
}

// TestWatchEndsWhenTheStoreGoesAway: a stream whose token can no longer
// be checked (the store is unreachable) ends with an error event rather
// than streaming on unchecked (PostgreSQL through a proxy that is cut).
func TestWatchEndsWhenTheStoreGoesAway(t *testing.T) {
	storetest.RequirePostgres(t)
	p := storetest.NewProxy(t, storetest.URL(t, storetest.Postgres), "")
	s := storetest.OpenURL(t, p.URL, checkpointd.SystemClock{})
	w := newWatchServer(t, s, nil)
	st := w.watch(w.token(checkpointd.RoleReader, nil), "", "")
	p.Cut()
	defer p.Restore()
	e, ok := st.next(10 * time.Second)
	if !ok || e.Type != "error" || !strings.Contains(e.Data, "store_unavailable") {
		t.Fatalf("after the store went away: %+v %v, want a store_unavailable error event", e, ok)
	}
	if _, ok := st.next(2 * time.Second); ok {
		t.Error("the stream went on after its error event")
	}
}
