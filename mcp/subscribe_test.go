package mcp_test

import (
	"context"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/mcp"
	"github.com/checkpointd/checkpointd/store/storetest"
	"github.com/checkpointd/checkpointd/webhook/webhooktest"
)

// push delivers a signed Gitea push moving branch from before to after.
func (d *daemon) push(t *testing.T, delivery, branch, before, after string) {
	t.Helper()
	webhooktest.Push(t, d.URL, webhookSecret, delivery, "acme/widgets", branch, before, after)
}

// TestSubscriptionHearsDrift: an agent subscribed to its session's
// resource is notified within a second when a signed push makes its
// checkpoint stale, and reading the resource then says stale; a session
// it did not subscribe to sends it nothing.
func TestSubscriptionHearsDrift(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		d := newDaemon(t, b)
		tok := d.token(checkpointd.RoleAgent, "acme/*")
		updated := make(chan string, 16)
		cs := d.connect(t, tok, &sdk.ClientOptions{ResourceUpdatedHandler: func(_ context.Context, req *sdk.ResourceUpdatedNotificationRequest) {
			updated <- req.Params.URI
		}})
		agent := newCaller(t, cs)
		started := agent.must("session_start", map[string]any{"repo": "acme/widgets", "role": "author", "branch": "fix-12", "agent": map[string]any{}})
		sid, run := str(started, "session", "id"), str(started, "run", "id")
		other := agent.must("session_start", map[string]any{"repo": "acme/widgets", "role": "author", "branch": "other", "agent": map[string]any{}})
		agent.must("checkpoint_write", map[string]any{"session_id": sid, "checkpoint": checkpoint(run, 1, "implementing")})
		d.push(t, "d-1", "fix-12", strings.Repeat("e", 40), head)

		if err := cs.Subscribe(t.Context(), &sdk.SubscribeParams{URI: mcp.SessionURI(sid)}); err != nil {
			t.Fatal(err)
		}
		drain := func() {
			for {
				select {
				case <-updated:
				case <-time.After(300 * time.Millisecond):
					return
				}
			}
		}
		drain() // whatever the feed still had in flight
		// Another session's change is not this subscriber's business.
		d.push(t, "d-x", "other", strings.Repeat("e", 40), strings.Repeat("9", 40))
		// The branch moves on the forge: the checkpoint is stale now.
		start := time.Now()
		d.push(t, "d-2", "fix-12", head, strings.Repeat("a", 40))
		select {
		case uri := <-updated:
			if uri != mcp.SessionURI(sid) {
				t.Errorf("notified of %s, want %s (not the unsubscribed %s)", uri, mcp.SessionURI(sid), str(other, "session", "id"))
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("notified after %v, want within 1 s", d)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no notifications/resources/updated after the push")
		}
		res, err := cs.ReadResource(t.Context(), &sdk.ReadResourceParams{URI: mcp.SessionURI(sid)})
		if err != nil || !strings.Contains(res.Contents[0].Text, `"validity":"stale"`) {
			t.Errorf("the resource after the push: %v %v", err, res)
		}
		r := agent.must("session_resume", map[string]any{"session_id": sid, "run_id": run})
		if get(r, "resumable") != false || get(r, "validity") != "stale" {
			t.Errorf("resume after drift: %v", r)
		}
	})
}
