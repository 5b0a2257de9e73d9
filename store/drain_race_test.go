package store_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// creation is a session create or a run takeover, the two ways a drain is
// told to refuse.
type creation func(ctx context.Context, s *store.Store, sess *checkpointd.Session) error

func createSession(ctx context.Context, s *store.Store, _ *checkpointd.Session) error {
	_, err := s.CreateSession(ctx, store.NewSession{Repo: "acme/widgets", Role: "reviewer", Issue: 1, Branch: "fix-new",
		Agent: checkpointd.Agent{Runtime: "claude-code"}})
	return err
}

func takeOver(ctx context.Context, s *store.Store, sess *checkpointd.Session) error {
	_, err := s.StartRun(ctx, sess.ID, store.NewRun{Takeover: true, Reason: "restart", Agent: checkpointd.Agent{Runtime: "claude-code"}})
	return err
}

// TestDrainCreationRace: a session create or a takeover that passed its
// "not draining" check while a drain started and completed on another
// replica is either refused or seen by the completion — never passed
// over. Each window is held open deterministically: the create by a raw
// transaction holding the session_counts rows its trigger must update
// (as in issue 13), the takeover by a pause after its check (it needs no
// row before the session's, which the completion needs too), the drain's
// start by a raw transaction holding the row of a session its start must
// reset. SQLite has one writer: its windows are held by the pause, and the
// drain simply waits.
func TestDrainCreationRace(t *testing.T) {
	cases := []struct {
		name    string
		backend storetest.Backend
		create  creation
		// drainFirst holds the drain's start open and creates inside it;
		// otherwise the creation passes its check and is held open while
		// the drain starts and completes.
		drainFirst bool
		// pause holds the creation open after its check instead of a
		// raw transaction holding the session_counts rows.
		pause bool
	}{
		{"session created across a completion", storetest.Postgres, createSession, false, false},
		{"run started across a completion", storetest.Postgres, takeOver, false, true},
		{"session created while the drain starts", storetest.Postgres, createSession, true, false},
		{"run started while the drain starts", storetest.Postgres, takeOver, true, false},
		{"session created across a completion", storetest.SQLite, createSession, false, true},
		{"run started across a completion", storetest.SQLite, takeOver, false, true},
	}
	for _, c := range cases {
		t.Run(string(c.backend)+"/"+c.name, func(t *testing.T) {
			ctx := t.Context()
			url := storetest.URL(t, c.backend)
			creator := storetest.OpenURL(t, url, checkpointd.SystemClock{})
			gate := creator // SQLite: one daemon per file
			if c.backend == storetest.Postgres {
				gate = storetest.OpenURL(t, url, checkpointd.SystemClock{})
			}
			raw := openRaw(t, c.backend, url)
			// Two ready sessions: the takeover's, and one whose row holds
			// the drain's start open.
			sess := drainSession(t, creator, "acme/widgets", "author", "fix-1")
			other := drainSession(t, creator, "acme/widgets", "author", "fix-2")
			for _, s := range []*checkpointd.Session{sess, other} {
				push(t, creator, s, headA)
				mustWrite(t, creator, s, drainDoc(s, headA))
			}

			created := make(chan error, 1)
			create := func() { created <- c.create(ctx, creator, sess) }
			drained := make(chan error, 1)
			drain := func() { drained <- startWriteComplete(ctx, gate, sess, other) }
			switch {
			case c.drainFirst:
				hold := holding(t, url, `SELECT id FROM sessions WHERE id = $1 FOR UPDATE`, other.ID)
				go drain()
				starter := waitBlockedBy(t, raw, backendPID(t, hold), drained)
				if starter == 0 {
					t.Fatal("the drain started although a session row it resets was held")
				}
				go create()
				waitBlockedBy(t, raw, starter, created)
				if err := hold.Rollback(); err != nil {
					t.Fatal(err)
				}
			case c.pause:
				paused, resume := make(chan int, 1), make(chan struct{})
				store.PauseAfterDrainCheck(creator, func(pid int) { paused <- pid; <-resume })
				go create()
				var pid int
				select {
				case pid = <-paused:
				case err := <-created:
					t.Fatalf("the creation finished without passing its check: %v", err)
				}
				store.PauseAfterDrainCheck(creator, nil)
				go drain()
				if c.backend == storetest.Postgres {
					waitBlockedBy(t, raw, pid, drained)
				} else {
					// One writer: the drain waits for the paused creation.
					select {
					case err := <-drained:
						drained <- err
					case <-time.After(200 * time.Millisecond):
					}
				}
				close(resume)
			default:
				// Every shard row exists, so the create's trigger must
				// update one of the held rows rather than insert its own.
				if _, err := raw.ExecContext(ctx, `INSERT INTO session_counts (shard, validity, parked, drain_ready, n)
SELECT substr('0123456789abcdef', i, 1), 'unverified', FALSE, FALSE, 0 FROM generate_series(1, 16) i ON CONFLICT DO NOTHING`); err != nil {
					t.Fatal(err)
				}
				hold := holding(t, url, `SELECT shard FROM session_counts FOR UPDATE`)
				go create()
				pid := waitBlockedBy(t, raw, backendPID(t, hold), created)
				if pid == 0 {
					t.Fatal("the create committed although the session_counts rows were held")
				}
				go drain()
				waitBlockedBy(t, raw, pid, drained)
				if err := hold.Rollback(); err != nil {
					t.Fatal(err)
				}
			}
			createErr, drainErr := <-created, <-drained
			if drainErr != nil {
				t.Fatalf("drain: %v", drainErr)
			}
			if createErr != nil && !errors.Is(createErr, checkpointd.ErrDraining) {
				t.Fatalf("creation: %v, want success or ErrDraining", createErr)
			}
			t.Logf("creation: %v", createErr)
			assertNothingEscaped(t, gate)
		})
	}
}

// startWriteComplete is the operator and the agents on another replica:
// the drain starts, each session writes a complete checkpoint with its
// current run (a write refused for a superseded run is fencing at work),
// and the drain is asked to complete.
func startWriteComplete(ctx context.Context, s *store.Store, sessions ...*checkpointd.Session) error {
	if _, _, err := s.StartDrain(ctx, "deploy", "tok_op"); err != nil {
		return err
	}
	for _, sess := range sessions {
		cur, err := s.GetSession(ctx, sess.ID)
		if err != nil {
			return err
		}
		if _, err := write(ctx, s, sess.ID, drainDoc(cur, headA)); err != nil && !errors.Is(err, checkpointd.ErrRunSuperseded) {
			return err
		}
	}
	_, err := s.CompleteDrain(ctx, store.DrainCompletion{By: "tok_op", Limit: 10})
	return err
}

// assertNothingEscaped checks the gate's promise: when the drain
// completed, nothing blocks it and every active session's log records the
// completion after its current run started.
func assertNothingEscaped(t *testing.T, s *store.Store) {
	t.Helper()
	st := drainStatus(t, s, store.DrainQuery{})
	t.Logf("drain %s, counts %+v", st.Drain.State, st.Counts)
	if st.Drain.State != checkpointd.DrainCompleted {
		return
	}
	if st.Counts.Blocking != 0 {
		t.Errorf("the drain completed, yet %d of %d active sessions block it: %+v", st.Counts.Blocking, st.Counts.Active, st.Blocking)
	}
	if _, err := s.NoteDrainCompleted(t.Context()); err != nil {
		t.Fatal(err)
	}
	active, err := s.ListSessions(t.Context(), store.SessionFilter{State: checkpointd.SessionActive, Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	for _, sess := range active {
		evs, err := s.ListEvents(t.Context(), sess.ID, 0, 500)
		if err != nil {
			t.Fatal(err)
		}
		completed := -1
		for i, e := range evs {
			if e.Kind == checkpointd.EventDrainCompleted {
				completed = i
			}
		}
		if completed < 0 {
			t.Errorf("session %s is active but its log has no drain.completed", sess.ID)
			continue
		}
		for _, e := range evs[completed+1:] {
			if e.Kind == checkpointd.EventRunStarted || e.Kind == checkpointd.EventSessionCreated {
				t.Errorf("session %s: %s (seq %d) after the drain completed", sess.ID, e.Kind, e.Seq)
			}
		}
	}
}

// backendPID is the PostgreSQL backend of a raw transaction.
func backendPID(t *testing.T, tx *sql.Tx) int {
	t.Helper()
	var pid int
	if err := tx.QueryRowContext(t.Context(), `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

// waitBlockedBy waits until some backend waits for a lock held by pid, and
// returns that backend's pid, or returns 0 once done yields (the other
// side finished without waiting; the value is put back).
func waitBlockedBy(t *testing.T, raw *sql.DB, pid int, done chan error) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			done <- err
			return 0
		default:
		}
		var blocked int
		err := raw.QueryRowContext(t.Context(), `SELECT pid FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid)) LIMIT 1`, pid).Scan(&blocked)
		if err == nil {
			return blocked
		}
		if !errors.Is(err, sql.ErrNoRows) {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("nothing waited for backend %d, and nothing finished", pid)
	return 0
}

// TestDrainCompletionWaitsForReadinessLost: a change on another replica
// that makes a ready session block (here a raw transaction marking it
// stale, as a webhook's settle would) and has not committed when a
// completion counts is waited for, and the completion then sees it: it
// answers blocked, never completed with a stale session. The change holds
// the readiness lock shared from its trigger; the completion takes it
// exclusively before it counts again.
func TestDrainCompletionWaitsForReadinessLost(t *testing.T) {
	ctx := t.Context()
	url := storetest.URL(t, storetest.Postgres)
	s := storetest.OpenURL(t, url, checkpointd.SystemClock{})
	raw := openRaw(t, storetest.Postgres, url)
	sess := drainSession(t, s, "acme/widgets", "author", "fix-1")
	other := drainSession(t, s, "acme/widgets", "author", "fix-2")
	for _, x := range []*checkpointd.Session{sess, other} {
		push(t, s, x, headA)
	}
	if _, _, err := s.StartDrain(ctx, "deploy", "tok_op"); err != nil {
		t.Fatal(err)
	}
	for _, x := range []*checkpointd.Session{sess, other} {
		mustWrite(t, s, x, drainDoc(x, headA))
	}
	if st := drainStatus(t, s, store.DrainQuery{}); st.Counts.Blocking != 0 {
		t.Fatalf("before the change: %+v", st.Counts)
	}
	hold := holding(t, url, `UPDATE sessions SET validity = 'stale', validity_reason = 'head_moved' WHERE id = $1`, sess.ID)
	decided := make(chan error, 1)
	var d *checkpointd.Drain
	go func() {
		var err error
		d, err = s.CompleteDrain(ctx, store.DrainCompletion{By: "tok_op", Limit: 10})
		decided <- err
	}()
	if waitBlockedBy(t, raw, backendPID(t, hold), decided) == 0 {
		t.Fatal("the completion decided without waiting for the uncommitted change that made a session block")
	}
	if err := hold.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-decided; err != nil {
		t.Fatalf("CompleteDrain: %v", err)
	}
	if d.Decision.Outcome != checkpointd.DrainOutcomeBlocked || d.Decision.Counts.Blocking != 1 || d.Decision.Blocking[0].SessionID != sess.ID {
		t.Fatalf("decision %+v, want blocked by %s", d.Decision, sess.ID)
	}
}
