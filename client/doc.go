// Package client is the Go client of the checkpointd HTTP API v1:
// typed requests and answers over the domain types of
// package checkpointd, problem answers as *Error with their stable code,
// lists as iterators, idempotency keys on the writes the daemon
// deduplicates, and retries only where a repeat cannot act twice.
//
// The agent loop, in short (errors unchecked here; Example runs it whole):
//
//	c, _ := client.New(client.Config{Address: "http://127.0.0.1:8080", Token: token})
//	agent := checkpointd.Agent{Runtime: "claude-code", Instance: "host-7/pid-4411"}
//	s, _ := c.Sessions().Create(ctx, &client.CreateSessionRequest{Repo: "acme/widgets", Role: "author", PR: 7, Agent: agent},
//		&client.WriteOptions{IdempotencyKey: "acme/widgets#7 author"}) // the key names the task: a restart gets this session back
//	pr7 := checkpointd.Resource{Kind: checkpointd.ResourcePR, Repo: "acme/widgets", Number: 7}
//	l, _ := c.Leases().Acquire(ctx, &client.AcquireRequest{Resource: pr7, SessionID: s.Session.ID, RunID: s.Run.ID, TTLSeconds: 600})
//	losses := c.KeepAlive(ctx, s.Session.ID, s.Run.ID, nil) // heartbeats; renews l at a third of its term; reports a Loss
//	doc := checkpointd.Document{SchemaVersion: checkpointd.SchemaVersion, RunID: s.Run.ID, FencingToken: s.Run.FencingToken,
//		Role: "author", Stage: "implementing", Leases: []checkpointd.LeaseRef{{LeaseID: l.ID, FencingToken: l.FencingToken}} /* … */}
//	_, err := c.Checkpoints().Write(ctx, s.Session.ID, &doc, nil) // on every stage transition, and when c.Draining()
//
//	// … the process dies; a new one finds its session and asks first:
//	page, _ := c.Sessions().List(ctx, client.SessionListOptions{Repo: "acme/widgets", PR: 7, State: checkpointd.SessionActive})
//	id := page.Items[0].ID
//	v, _ := c.Sessions().Resume(ctx, id, "")                           // resumable? reasons? pending_mutation?
//	taken, _ := c.Sessions().Takeover(ctx, id, "previous run died", agent) // the old run now gets run_superseded;
//	// taken.Leases are the leases the new run holds, with their new fencing tokens
//	_, _ = c.Sessions().End(ctx, id, &client.EndRequest{RunID: taken.Run.ID, Outcome: checkpointd.OutcomeCompleted})
//
// A watch (Client.Watch) hears each change typed: a *ValidityEvent when a
// push makes the checkpoint stale, a *LeaseEvent, a *RunEvent, …. Package
// clienttest runs a real daemon in process for an agent's own tests.
//
// Errors: a problem answer is an *Error (errors.As, then Code: not_found,
// run_superseded, lease_held, invalid_checkpoint with Problems, gone with
// Tombstone, …); it also matches the checkpointd sentinel of its code with
// errors.Is. A request that got no answer is a *TransportError: it may or
// may not have been handled.
//
// Retries: reads, and the two writes that carry an Idempotency-Key
// (session create and checkpoint write; without a key of the caller's the
// Client draws one per call), are retried with the same key after a
// transport failure, a 502/503/504 (not 503 draining) or a 409
// idempotency_in_flight, with a bounded, jittered backoff that honours the
// ctx and Retry-After. Everything else — lease acquire, renew and release,
// run start and takeover, end, park, clear, drain and reconcile — is sent
// exactly once: a lost answer is read back, never guessed at.
//
// Redirects are never followed, whatever http.Client the Config carries: a
// 3xx answer is an *Error with its status. Following one would resend the
// body and the bearer token to another address, or turn a POST into a GET
// whose 200 would read as done.
//
// Every answer's Checkpointd-Drain header is remembered: Client.Draining
// tells an agent that a drain started, and that it should write a complete
// checkpoint and wind down.
package client
