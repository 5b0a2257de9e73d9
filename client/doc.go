// Package client is the Go client of the checkpointd HTTP API v1
// (DESIGN §6, §13): typed requests and answers over the domain types of
// package checkpointd, problem answers as *Error with their stable code,
// lists as iterators, idempotency keys on the writes the daemon
// deduplicates, and retries only where a repeat cannot act twice.
//
// The agent loop, in short:
//
//	c, _ := client.New(client.Config{Address: "http://127.0.0.1:8080", Token: token})
//	s, _ := c.Sessions().Create(ctx, &client.CreateSessionRequest{Repo: "acme/widgets", Role: "author", PR: 7}, nil)
//	l, _ := c.Leases().Acquire(ctx, &client.AcquireRequest{Resource: pr7, SessionID: s.Session.ID, RunID: s.Run.ID, TTLSeconds: 600})
//	doc := checkpointd.Document{SchemaVersion: 1, RunID: s.Run.ID, FencingToken: s.Run.FencingToken, Role: "author", Stage: "implementing" /* … */}
//	_, err := c.Checkpoints().Write(ctx, s.Session.ID, &doc, nil) // on every stage transition, and when c.Draining()
//	// … the process dies; a new one:
//	v, _ := c.Sessions().Resume(ctx, id, "")                       // resumable? reasons? pending_mutation?
//	run, _ := c.Sessions().Takeover(ctx, id, "previous run died", agent) // the old run now gets run_superseded
//	_, _ = c.Sessions().End(ctx, id, &client.EndRequest{RunID: run.ID, Outcome: checkpointd.OutcomeCompleted})
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
