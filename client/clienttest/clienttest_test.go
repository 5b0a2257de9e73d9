package clienttest_test

import (
	"context"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/client"
	"github.com/checkpointd/checkpointd/client/clienttest"
)

const (
	head1 = "0123456789abcdef0123456789abcdef01234567"
	head2 = "89abcdef0123456789abcdef0123456789abcdef"
)

// TestDaemon: an agent's test against the in-process daemon, as the
// package doc shows it: the watch hears each change typed (session,
// lease, checkpoint, validity, run), a push makes the checkpoint stale,
// a deleted branch invalidates it, and the configured workflow applies.
func TestDaemon(t *testing.T) {
	d := clienttest.New(t, clienttest.Options{Workflow: checkpointd.Workflow{Roles: []string{"author", "triager"}, Stages: []string{"triaging", "done"}}})
	c := d.Client(d.Token(checkpointd.RoleAgent, "acme/*"))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	if _, err := c.Sessions().Create(ctx, &client.CreateSessionRequest{Repo: "acme/widgets", Role: "reviewer"}, nil); err == nil {
		t.Error("a role the workflow does not configure was accepted")
	}
	events := make(chan client.WatchEvent, 256)
	go func() {
		for ev, err := range c.Watch(ctx, client.WatchOptions{Repo: "acme/widgets"}) {
			if err != nil {
				return
			}
			events <- ev
		}
	}()
	// The stream is open once it delivers a change: until then, sessions
	// are created that it may miss.
	create := func() *client.SessionCreated {
		s, err := c.Sessions().Create(ctx, &client.CreateSessionRequest{Repo: "acme/widgets", Role: "triager", Branch: "fix-7",
			Agent: checkpointd.Agent{Runtime: "test"}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for open := false; !open; {
		create()
		select {
		case <-events:
			open = true
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal("the watch never delivered a change")
		}
	}
	s := create()
	next := func(want string) client.WatchEvent {
		t.Helper()
		for {
			select {
			case ev := <-events:
				if ev.Type == want && ev.SessionID() == s.Session.ID {
					return ev
				}
			case <-ctx.Done():
				t.Fatalf("no %s event", want)
			}
		}
	}
	if ev, ok := next("session").Event.(*client.SessionEvent); !ok || ev.Change != "created" || ev.SessionID != s.Session.ID || ev.Repo != "acme/widgets" {
		t.Errorf("the session event: %+v", ev)
	}

	l, err := c.Leases().Acquire(ctx, &client.AcquireRequest{Resource: checkpointd.Resource{Kind: checkpointd.ResourceBranch, Repo: "acme/widgets", Branch: "fix-7"},
		SessionID: s.Session.ID, RunID: s.Run.ID, TTLSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	if ev, ok := next("lease").Event.(*client.LeaseEvent); !ok || ev.Change != "acquired" || ev.LeaseID != l.ID || ev.Resource.Branch != "fix-7" {
		t.Errorf("the lease event: %+v", ev)
	}
	if err := d.Push("acme/widgets", "fix-7", head1); err != nil {
		t.Fatal(err)
	}
	doc := &checkpointd.Document{SchemaVersion: checkpointd.SchemaVersion, RunID: s.Run.ID, FencingToken: s.Run.FencingToken,
		Role: "triager", Stage: "triaging", Workspace: &checkpointd.Workspace{Branch: "fix-7", Head: head1}}
	if _, err := c.Checkpoints().Write(ctx, s.Session.ID, doc, nil); err != nil {
		t.Fatal(err)
	}
	if ev, ok := next("checkpoint").Event.(*client.CheckpointEvent); !ok || ev.Seq != 1 || ev.Stage != "triaging" {
		t.Errorf("the checkpoint event: %+v", ev)
	}
	if ev, ok := next("validity").Event.(*client.ValidityEvent); !ok || ev.To != checkpointd.ValidityValid {
		t.Errorf("the checkpoint on the live head: %+v", ev)
	}

	if err := d.Push("acme/widgets", "fix-7", head2); err != nil {
		t.Fatal(err)
	}
	if ev, ok := next("validity").Event.(*client.ValidityEvent); !ok || ev.From != checkpointd.ValidityValid || ev.To != checkpointd.ValidityStale {
		t.Errorf("after a push: %+v", ev)
	}
	if err := d.Push("acme/widgets", "fix-7", "not-a-commit"); err == nil {
		t.Error("a head that is no commit id was taken")
	}

	taken, err := c.Sessions().Takeover(ctx, s.Session.ID, "the test", checkpointd.Agent{Runtime: "test"})
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev, ok := next("run").Event.(*client.RunEvent)
		if !ok {
			t.Fatal("a run event that did not decode")
		}
		if ev.Change == "started" {
			if ev.RunID != taken.Run.ID || !ev.Takeover || ev.FencingToken != 2 {
				t.Errorf("the takeover's run event: %+v", ev)
			}
			break
		}
	}

	if err := d.DeleteBranch("acme/widgets", "fix-7"); err != nil {
		t.Fatal(err)
	}
	if ev, ok := next("validity").Event.(*client.ValidityEvent); !ok || ev.To != checkpointd.ValidityInvalidated {
		t.Errorf("after the branch was deleted: %+v", ev)
	}
	v, err := c.Sessions().Resume(ctx, s.Session.ID, taken.Run.ID)
	if err != nil || v.Resumable || v.Validity != checkpointd.ValidityInvalidated {
		t.Errorf("resume after the delete: %+v %v", v, err)
	}
}

// TestStartAndClose: Start without a testing.TB, then Close: the daemon
// stops answering.
func TestStartAndClose(t *testing.T) {
	d, err := clienttest.Start()
	if err != nil {
		t.Fatal(err)
	}
	c := d.Client(d.Token(checkpointd.RoleReader, "*"))
	if err := c.Ready(t.Context()); err != nil {
		t.Fatal(err)
	}
	d.Close()
	if err := c.Health(t.Context()); err == nil {
		t.Error("the daemon answers after Close")
	}
	if _, err := clienttest.Start(clienttest.Options{Workflow: checkpointd.Workflow{Roles: []string{"Bad Role"}, Stages: []string{"x"}}}); err == nil {
		t.Error("an invalid workflow started a daemon")
	}
}
