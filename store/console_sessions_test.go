package store_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestConsoleSessions: the store keeps a console session as it was given,
// its forge grant sealed; notes a request at most once a minute; replaces
// it only while it still signs in with the token it had; ends it and the
// idle ones, handing back what they held.
func TestConsoleSessions(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		clock := checkpointd.NewManualClock(t0)
		s := storetest.Open(t, b, clock)
		grant := []byte(`{"access_token":"gto_secret-access","refresh_token":"gtr_secret-refresh"}`)
		cs := &checkpointd.ConsoleSession{IDDigest: "d1", TokenHash: "h1", CreatedAt: t0, LastSeenAt: t0,
			Principal: checkpointd.Principal{TokenID: "tok_1", Name: "dana", Role: checkpointd.RoleReader, Scope: []string{"acme/widgets"}},
			Forge:     &checkpointd.ForgeGrant{Login: "dana", OAuth: grant, CheckedAt: t0}}
		if err := s.CreateConsoleSession(ctx, cs); err != nil {
			t.Fatal(err)
		}
		plain := &checkpointd.ConsoleSession{IDDigest: "d2", TokenHash: "h2", CreatedAt: t0, LastSeenAt: t0,
			Principal: checkpointd.Principal{TokenID: "tok_2", Name: "op", Role: checkpointd.RoleOperator}}
		if err := s.CreateConsoleSession(ctx, plain); err != nil {
			t.Fatal(err)
		}
		got, err := s.ConsoleSession(ctx, "d1")
		if err != nil || got.TokenHash != "h1" || got.Principal.Name != "dana" || got.Principal.Scope[0] != "acme/widgets" ||
			got.Forge == nil || !bytes.Equal(got.Forge.OAuth, grant) || !got.Forge.CheckedAt.Equal(t0) {
			t.Fatalf("read back %+v (forge %+v): %v", got, got.Forge, err)
		}
		if raw := s.RawConsoleGrant(t, "d1"); bytes.Contains([]byte(raw), []byte("secret")) {
			t.Errorf("the forge grant is stored in the clear: %s", raw)
		}
		if _, err := s.ConsoleSession(ctx, "nope"); !errors.Is(err, checkpointd.ErrNotFound) {
			t.Errorf("an unknown digest: %v", err)
		}

		// Noted at most once a minute.
		clock.Advance(30 * time.Second)
		if err := s.SeeConsoleSession(ctx, "d1", clock.Now()); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.ConsoleSession(ctx, "d1"); !got.LastSeenAt.Equal(t0) {
			t.Errorf("seen again within the minute: %v", got.LastSeenAt)
		}
		clock.Advance(31 * time.Second)
		if err := s.SeeConsoleSession(ctx, "d1", clock.Now()); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.ConsoleSession(ctx, "d1"); !got.LastSeenAt.Equal(t0.Add(61 * time.Second)) {
			t.Errorf("last seen %v, want a minute and a second later", got.LastSeenAt)
		}

		// Replaced only while it still holds h1.
		next := *got
		next.TokenHash, next.Principal.TokenID = "h1b", "tok_1b"
		if err := s.ReplaceConsoleSession(ctx, &next, "h-other"); !errors.Is(err, checkpointd.ErrNotFound) {
			t.Errorf("a replace that lost the race: %v", err)
		}
		if err := s.ReplaceConsoleSession(ctx, &next, "h1"); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.ConsoleSession(ctx, "d1"); got.TokenHash != "h1b" || got.Principal.TokenID != "tok_1b" || !bytes.Equal(got.Forge.OAuth, grant) {
			t.Errorf("after the replace: %+v", got)
		}

		// d2 has not been seen since t0: idle past a minute ago.
		idle, err := s.EndIdleConsoleSessions(ctx, t0.Add(time.Minute), 10)
		if err != nil || len(idle) != 1 || idle[0].IDDigest != "d2" || idle[0].Principal.TokenID != "tok_2" {
			t.Fatalf("idle sessions ended: %+v %v", idle, err)
		}
		ended, err := s.EndConsoleSession(ctx, "d1")
		if err != nil || ended == nil || ended.Forge == nil || ended.Principal.TokenID != "tok_1b" {
			t.Fatalf("end: %+v %v", ended, err)
		}
		if again, err := s.EndConsoleSession(ctx, "d1"); err != nil || again != nil {
			t.Errorf("ending it twice: %+v %v", again, err)
		}
		if _, err := s.ConsoleSession(ctx, "d2"); !errors.Is(err, checkpointd.ErrNotFound) {
			t.Errorf("an idle session after the sweep: %v", err)
		}
	})
}

// TestConsoleOAuthFlows: a sign-in's verifier is taken once, by any
// store on the database, and not after its time; it is stored sealed.
func TestConsoleOAuthFlows(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		url := storetest.URL(t, b)
		one := storetest.OpenURL(t, url, checkpointd.SystemClock{})
		other := storetest.OpenURL(t, url, checkpointd.SystemClock{})
		if err := one.PutConsoleOAuthFlow(ctx, "s1", "verifier-one", t0, t0.Add(-10*time.Minute)); err != nil {
			t.Fatal(err)
		}
		if err := one.PutConsoleOAuthFlow(ctx, "s2", "verifier-two", t0, t0.Add(-10*time.Minute)); err != nil {
			t.Fatal(err)
		}
		if v, err := other.TakeConsoleOAuthFlow(ctx, "s1", t0.Add(-time.Minute)); err != nil || v != "verifier-one" {
			t.Fatalf("the other replica takes the flow: %q %v", v, err)
		}
		if _, err := one.TakeConsoleOAuthFlow(ctx, "s1", t0.Add(-time.Minute)); !errors.Is(err, checkpointd.ErrNotFound) {
			t.Errorf("a flow taken twice: %v", err)
		}
		if _, err := one.TakeConsoleOAuthFlow(ctx, "s2", t0.Add(time.Second)); !errors.Is(err, checkpointd.ErrNotFound) {
			t.Errorf("a flow past its time: %v", err)
		}
		// A new flow sweeps those started before its cut-off.
		if err := one.PutConsoleOAuthFlow(ctx, "s3", "verifier-three", t0.Add(time.Hour), t0.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		if _, err := one.TakeConsoleOAuthFlow(ctx, "s2", t0.Add(-time.Hour)); !errors.Is(err, checkpointd.ErrNotFound) {
			t.Errorf("an old flow survived the sweep: %v", err)
		}
	})
}
