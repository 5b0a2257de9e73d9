package ui_test

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/checkpointd/checkpointd"
)

// TestRevokedTokenEndsAnOpenPage: a console page open on a token that is
// then revoked stops hearing the change feed within the revocation bound (1 s)
// (the API's stream re-authenticates every second and ends; the console's
// relay ends with it): a change made after the revocation never reaches
// the open page, and the next request of the page goes back to sign-in.
func TestRevokedTokenEndsAnOpenPage(t *testing.T) {
	c := newConsole(t)
	secret := c.token(checkpointd.RoleOperator, nil)
	ctx := browser(t)
	c.signIn(t, ctx, secret)
	a := c.startSession(t, "fix-a", "host-1/pid-1")
	do(t, ctx, chromedp.Navigate(c.URL+"/ui/"))
	waitRow(t, ctx, a.id, "unverified")

	// The page is live: a change reaches it without a reload.
	c.push(t, "d-1", "fix-a", head(1))
	c.checkpoint(t, a, head(1), "implementing", "")
	waitRow(t, ctx, a.id, "valid")
	if c.liveRefreshes.Load() == 0 {
		t.Fatal("the page did not update itself before the revocation: the test proves nothing")
	}

	who, err := c.store.Authenticate(t.Context(), checkpointd.HashToken(secret))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.store.RevokeToken(t.Context(), who.TokenID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // §15: within 1 s, and the stream's own second
	before := c.liveRefreshes.Load()
	c.pushFrom(t, "d-2", "fix-a", head(1), head(2)) // A turns stale
	time.Sleep(2 * time.Second)                     // live.js refetches 300 ms after a change
	if after := c.liveRefreshes.Load(); after != before {
		t.Errorf("a change after the revocation reached the open page (%d live refetches)", after-before)
	}
	do(t, ctx, chromedp.Navigate(c.URL+"/ui/"), chromedp.WaitVisible(chromedp.CSS(`input[type=password]#token`)))
}
