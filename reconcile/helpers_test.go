package reconcile_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/reconcile"
	"github.com/checkpointd/checkpointd/reconcile/forgetest"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// env is a real store, a fake forge and a reconciler between them, with
// short timeouts and an instant back-off that records what it was asked.
type env struct {
	t     *testing.T
	s     *store.Store
	forge *forgetest.Server
	r     *reconcile.Reconciler

	mu       sync.Mutex
	backoffs []time.Duration // the retryAfter of every back-off
}

func newEnv(t *testing.T, b storetest.Backend) *env {
	t.Helper()
	return newEnvOn(t, storetest.Open(t, b, checkpointd.SystemClock{}))
}

func newEnvOn(t *testing.T, s *store.Store) *env {
	t.Helper()
	e := &env{t: t, s: s, forge: forgetest.New(t)}
	e.r = &reconcile.Reconciler{Store: s, Forge: reconcile.Gitea(e.forge.URL, "", 0), ForgeURL: e.forge.URL,
		Concurrency: 3, CallTimeout: 5 * time.Second, Attempts: 3,
		Backoff: func(_ int, retryAfter time.Duration) time.Duration {
			e.mu.Lock()
			e.backoffs = append(e.backoffs, retryAfter)
			e.mu.Unlock()
			return time.Millisecond
		}}
	return e
}

// sha is a distinct full SHA-1 per n.
func sha(n int) string { return fmt.Sprintf("%040x", 0xabc000+n) }

// session creates a session bound to branch and/or pr of repo and writes
// a checkpoint with head, naming leases.
func (e *env) session(repo, branch string, pr int64, head string, leases ...checkpointd.LeaseRef) *checkpointd.Session {
	e.t.Helper()
	sess, err := e.s.CreateSession(e.t.Context(), store.NewSession{Repo: repo, Role: "author", Branch: branch, PR: pr})
	if err != nil {
		e.t.Fatal(err)
	}
	e.checkpoint(sess, head, leases...)
	return sess
}

func (e *env) checkpoint(sess *checkpointd.Session, head string, leases ...checkpointd.LeaseRef) {
	e.t.Helper()
	run := sess.CurrentRun
	d := &checkpointd.Document{SchemaVersion: 1, RunID: run.ID, FencingToken: run.FencingToken, Role: "author",
		Stage: "implementing", Target: &checkpointd.Target{Repo: sess.Repo, PR: sess.PR},
		Workspace: &checkpointd.Workspace{Branch: sess.Branch, Head: head, Worktree: sess.Worktree}, Leases: leases}
	if _, err := e.s.WriteCheckpoint(e.t.Context(), store.CheckpointWrite{SessionID: sess.ID, Doc: d, Digest: "d"}); err != nil {
		e.t.Fatal(err)
	}
}

// lease acquires res for the session's run and returns it as a checkpoint names it.
func (e *env) lease(sess *checkpointd.Session, res checkpointd.Resource) (*checkpointd.Lease, checkpointd.LeaseRef) {
	e.t.Helper()
	l, err := e.s.AcquireLease(e.t.Context(), store.NewLease{Resource: res, SessionID: sess.ID, RunID: sess.CurrentRun.ID, TTL: time.Hour})
	if err != nil {
		e.t.Fatal(err)
	}
	return l, checkpointd.LeaseRef{LeaseID: l.ID, FencingToken: l.FencingToken}
}

func (e *env) pass() *reconcile.Report {
	e.t.Helper()
	rep, err := e.r.Once(e.t.Context(), reconcile.TriggerAPI)
	if err != nil {
		e.t.Fatalf("pass: %v", err)
	}
	return rep
}

func (e *env) get(sess *checkpointd.Session) *checkpointd.Session {
	e.t.Helper()
	got, err := e.s.GetSession(e.t.Context(), sess.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	return got
}

// expect fails unless the session's validity is want and its reason
// contains reason.
func (e *env) expect(sess *checkpointd.Session, want checkpointd.Validity, reason string) {
	e.t.Helper()
	got := e.get(sess)
	if got.Validity != want || !strings.Contains(got.ValidityReason, reason) {
		e.t.Errorf("session on %s %s #%d: %s (%s), want %s (…%s…)", got.Repo, got.Branch, got.PR, got.Validity, got.ValidityReason, want, reason)
	}
}

// lastValidityEvent is the data of the session's latest validity.changed.
func (e *env) lastValidityEvent(sess *checkpointd.Session) map[string]any {
	e.t.Helper()
	evs, err := e.s.ListEvents(e.t.Context(), sess.ID, 0, 500)
	if err != nil {
		e.t.Fatal(err)
	}
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Kind == checkpointd.EventValidity {
			var m map[string]any
			_ = json.Unmarshal(evs[i].Data, &m)
			return m
		}
	}
	return nil
}

func forgetestPull(n int64, state string, merged bool, headRef, head string) forgetest.Pull {
	return forgetest.Pull{Number: n, State: state, Merged: merged, HeadRef: headRef, HeadSHA: head}
}
