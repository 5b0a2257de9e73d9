package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/client"
	"github.com/checkpointd/checkpointd/client/clienttest"
)

// The agent loop: start a session, lease the PR, write a checkpoint on a
// stage transition; after a crash a new process reads the resume verdict
// and takes over (the old run is fenced off); a push makes the checkpoint
// stale, the run checks and writes a fresh one; the session ends.
//
// The daemon is a real one in process (package clienttest, which an
// agent's own tests use the same way); forgeAt stands for the forge
// reporting a new head.
func Example() {
	d := startDaemon()
	defer d.Close()
	ctx := context.Background()

	// An agent process starts work on PR 7 of acme/widgets.
	c, err := client.New(client.Config{Address: d.URL, Token: d.Token(checkpointd.RoleAgent, "acme/*")})
	if err != nil {
		log.Fatal(err)
	}
	agent := checkpointd.Agent{Runtime: "claude-code", Model: "some-model", Instance: "host-1"}
	s, err := c.Sessions().Create(ctx, &client.CreateSessionRequest{
		Repo: "acme/widgets", Role: "author", PR: 7, Branch: "fix-7", Agent: agent}, nil)
	if err != nil {
		log.Fatal(err)
	}
	id := s.Session.ID
	pr7 := checkpointd.Resource{Kind: checkpointd.ResourcePR, Repo: "acme/widgets", Number: 7}
	l, err := c.Leases().Acquire(ctx, &client.AcquireRequest{Resource: pr7, SessionID: id, RunID: s.Run.ID, TTLSeconds: 600})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("run", s.Run.FencingToken, "holds lease", l.FencingToken, "on", l.Resource.Key())

	_ = forgeAt(d, head1) // the forge reports the PR's head
	doc := checkpointd.Document{SchemaVersion: checkpointd.SchemaVersion, RunID: s.Run.ID, FencingToken: s.Run.FencingToken,
		Role: "author", Stage: "implementing", Identity: &checkpointd.Identity{Runtime: "claude-code"},
		Target:     &checkpointd.Target{Repo: "acme/widgets", PR: 7},
		Workspace:  &checkpointd.Workspace{Branch: "fix-7", Head: head1},
		Leases:     []checkpointd.LeaseRef{{LeaseID: l.ID, FencingToken: l.FencingToken}},
		NextAction: &checkpointd.NextAction{Actor: "author", Action: "make the tests pass"},
		Recovery:   &checkpointd.Recovery{Instructions: "git fetch && git checkout fix-7"}}
	w, err := c.Checkpoints().Write(ctx, id, &doc, &client.WriteOptions{IdempotencyKey: id + "/implementing"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("checkpoint", w.Checkpoint.Seq, "complete:", w.Checkpoint.Complete)

	// The process crashes. A new one, knowing the session id, asks first.
	c2, _ := client.New(client.Config{Address: d.URL, Token: d.Token(checkpointd.RoleAgent, "acme/*")})
	v, err := c2.Sessions().Resume(ctx, id, "")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("resumable:", v.Resumable, "from stage", v.Checkpoint.Stage)
	taken, err := c2.Sessions().Takeover(ctx, id, "the previous process crashed", agent)
	if err != nil {
		log.Fatal(err)
	}
	run := taken.Run
	fmt.Println("took over as run", run.FencingToken)
	var moved []checkpointd.LeaseRef
	for _, l := range taken.Leases { // the leases the new run holds now, with their new tokens
		fmt.Println("the lease moved: token", l.FencingToken, "held by the new run:", l.Holder.RunID == run.ID)
		moved = append(moved, checkpointd.LeaseRef{LeaseID: l.ID, FencingToken: l.FencingToken})
	}

	// Should the old process still be alive, it is fenced off.
	_, err = c.Checkpoints().Write(ctx, id, &doc, nil)
	var p *client.Error
	if errors.As(err, &p) {
		fmt.Println("old run's write:", p.Status, p.Code)
	}

	// Someone pushes to the branch: the checkpoint no longer matches it.
	_ = forgeAt(d, "89abcdef0123456789abcdef0123456789abcdef")
	if v, err = c2.Sessions().Resume(ctx, id, run.ID); err != nil {
		log.Fatal(err)
	}
	fmt.Println("resumable:", v.Resumable, "because", v.Explanations[0].Reason)

	// The run looks at the new head, then records where it stands.
	doc.RunID, doc.FencingToken, doc.Stage = run.ID, run.FencingToken, "testing"
	doc.Workspace.Head = "89abcdef0123456789abcdef0123456789abcdef"
	doc.Leases = moved
	if w, err = c2.Checkpoints().Write(ctx, id, &doc, nil); err != nil {
		log.Fatal(err)
	}
	v, _ = c2.Sessions().Resume(ctx, id, run.ID)
	fmt.Println("checkpoint", w.Checkpoint.Seq, "resumable:", v.Resumable)

	ended, err := c2.Sessions().End(ctx, id, &client.EndRequest{RunID: run.ID, Outcome: checkpointd.OutcomeCompleted})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("session", ended.State, ended.Outcome)
	// Output:
	// run 1 holds lease 1 on pr:acme/widgets#7
	// checkpoint 1 complete: true
	// resumable: true from stage implementing
	// took over as run 2
	// the lease moved: token 2 held by the new run: true
	// old run's write: 409 run_superseded
	// resumable: false because stale
	// checkpoint 2 resumable: true
	// session ended completed
}

// A problem answer is an *Error: branch on its code, read its members.
func ExampleError() {
	d := startDaemon()
	defer d.Close()
	ctx := context.Background()
	c, _ := client.New(client.Config{Address: d.URL, Token: d.Token(checkpointd.RoleAgent, "acme/*")})
	newRun := func() *client.SessionCreated {
		s, err := c.Sessions().Create(ctx, &client.CreateSessionRequest{Repo: "acme/widgets", Role: "author", PR: 7,
			Agent: checkpointd.Agent{Runtime: "claude-code"}}, nil)
		if err != nil {
			log.Fatal(err)
		}
		return s
	}
	first, second := newRun(), newRun()
	pr7 := checkpointd.Resource{Kind: checkpointd.ResourcePR, Repo: "acme/widgets", Number: 7}
	if _, err := c.Leases().Acquire(ctx, &client.AcquireRequest{Resource: pr7, SessionID: first.Session.ID, RunID: first.Run.ID, TTLSeconds: 60}); err != nil {
		log.Fatal(err)
	}

	_, err := c.Leases().Acquire(ctx, &client.AcquireRequest{Resource: pr7, SessionID: second.Session.ID, RunID: second.Run.ID, TTLSeconds: 60})
	var p *client.Error
	if errors.As(err, &p) && p.Code == "lease_held" {
		fmt.Println(p.Status, p.Code, "held by the first session:", p.Holder().SessionID == first.Session.ID)
	}
	fmt.Println("is ErrLeaseHeld:", errors.Is(err, checkpointd.ErrLeaseHeld))

	_, err = c.Sessions().Create(ctx, &client.CreateSessionRequest{Repo: "acme", Role: "author"}, nil)
	if errors.As(err, &p) {
		for _, pr := range p.Problems {
			fmt.Println(p.Code, "at", pr.Path)
		}
	}
	// Output:
	// 409 lease_held held by the first session: true
	// is ErrLeaseHeld: true
	// invalid_request at /repo
}

// Lists are iterators over every page; List reads one page for a caller
// that pages itself (and shows NextCursor).
func ExampleSessions_All() {
	d := startDaemon()
	defer d.Close()
	ctx := context.Background()
	c, _ := client.New(client.Config{Address: d.URL, Token: d.Token(checkpointd.RoleAgent, "acme/*")})
	for _, pr := range []int64{1, 2, 3} {
		if _, err := c.Sessions().Create(ctx, &client.CreateSessionRequest{Repo: "acme/widgets", Role: "reviewer", PR: pr,
			Agent: checkpointd.Agent{Runtime: "claude-code"}}, nil); err != nil {
			log.Fatal(err)
		}
	}
	for s, err := range c.Sessions().All(ctx, client.SessionListOptions{State: checkpointd.SessionActive,
		ListOptions: client.ListOptions{Limit: 2}}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(s.Repo, "PR", s.PR, s.Role)
	}
	page, _ := c.Sessions().List(ctx, client.SessionListOptions{ListOptions: client.ListOptions{Limit: 2}})
	fmt.Println(len(page.Items), "on the first page; more:", page.NextCursor != "")
	// Output:
	// acme/widgets PR 3 reviewer
	// acme/widgets PR 2 reviewer
	// acme/widgets PR 1 reviewer
	// 2 on the first page; more: true
}

// Watching for drift: the holder of a session hears at once when a push
// makes its checkpoint stale, instead of polling resume. A lost stream is
// reopened from the last event seen (Last-Event-ID): nothing is missed.
func ExampleClient_Watch() {
	d := startDaemon()
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _ := client.New(client.Config{Address: d.URL, Token: d.Token(checkpointd.RoleAgent, "acme/*")})
	s, err := c.Sessions().Create(ctx, &client.CreateSessionRequest{Repo: "acme/widgets", Role: "author", PR: 7, Branch: "fix-7",
		Agent: checkpointd.Agent{Runtime: "claude-code"}}, nil)
	if err != nil {
		log.Fatal(err)
	}
	_ = forgeAt(d, head1)
	doc := checkpointd.Document{SchemaVersion: checkpointd.SchemaVersion, RunID: s.Run.ID, FencingToken: s.Run.FencingToken,
		Role: "author", Stage: "implementing", Target: &checkpointd.Target{Repo: "acme/widgets", PR: 7},
		Workspace: &checkpointd.Workspace{Branch: "fix-7", Head: head1}}
	if _, err := c.Checkpoints().Write(ctx, s.Session.ID, &doc, nil); err != nil {
		log.Fatal(err)
	}

	// Meanwhile the branch keeps moving on the forge (and back), so the
	// example sees a move however long its stream takes to open.
	done, pushed := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(pushed)
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			case <-time.After(200 * time.Millisecond):
			}
			_ = forgeAt(d, []string{"89abcdef0123456789abcdef0123456789abcdef", head1}[i%2])
		}
	}()
	for ev, err := range c.Watch(ctx, client.WatchOptions{Session: s.Session.ID}) {
		if err != nil {
			log.Fatal(err)
		}
		if v, ok := ev.Event.(*client.ValidityEvent); ok && v.To == checkpointd.ValidityStale {
			fmt.Println("validity", v.From, "→", v.To, "for", v.SessionID == s.Session.ID)
			break // stop working from the stale checkpoint: fetch, check, write a fresh one
		}
	}
	close(done)
	<-pushed
	// Output:
	// validity valid → stale for true
}

// startDaemon starts a real daemon in process, over SQLite in a temporary
// directory (an agent's test calls clienttest.New(t) instead).
func startDaemon() *clienttest.Daemon {
	d, err := clienttest.Start()
	if err != nil {
		log.Fatal(err)
	}
	return d
}

// forgeAt reports, as the forge would, that PR 7 of acme/widgets and its
// branch fix-7 are at head.
func forgeAt(d *clienttest.Daemon, head string) error {
	if err := d.PullRequestHead("acme/widgets", 7, head); err != nil {
		return err
	}
	return d.Push("acme/widgets", "fix-7", head)
}
