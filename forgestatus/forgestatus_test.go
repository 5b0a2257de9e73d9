package forgestatus_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/errlog"
	"github.com/checkpointd/checkpointd/forgestatus"
	"github.com/checkpointd/checkpointd/reconcile"
	"github.com/checkpointd/checkpointd/reconcile/forgetest"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

const (
	repo  = "acme/widgets"
	headA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	headB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

type world struct {
	s     *store.Store
	forge *forgetest.Server
	sess  *checkpointd.Session
	run   *checkpointd.Run
	n     int
	// stop ends the publisher and waits for it (idempotent).
	stop func()
}

// start runs a publisher over a real store and a fake Gitea until the
// test ends.
func start(t *testing.T, b storetest.Backend, tune func(*forgestatus.Publisher)) *world {
	w := &world{s: storetest.Open(t, b, checkpointd.SystemClock{}), forge: forgetest.New(t)}
	w.forge.AddRepo(7, repo)
	sess, err := w.s.CreateSession(t.Context(), store.NewSession{Repo: repo, Role: "author", PR: 34, Branch: "fix-12",
		Agent: checkpointd.Agent{Runtime: "claude-code", Instance: "host-7/pid-1"}})
	if err != nil {
		t.Fatal(err)
	}
	w.sess, w.run = sess, sess.CurrentRun
	p := &forgestatus.Publisher{Store: w.s, Forge: reconcile.Gitea(w.forge.URL, "", 0), ConsoleURL: "https://cp.example/",
		Backoff: func(int) time.Duration { return time.Millisecond }, Sweep: time.Hour, Errors: errlog.New(w.s, nil, nil)}
	if tune != nil {
		tune(p)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = w.s.RunExclusive(ctx, "forge-status", p.Publish) })
	w.stop = sync.OnceFunc(func() { cancel(); wg.Wait() })
	t.Cleanup(w.stop)
	return w
}

func (w *world) checkpoint(t *testing.T, head string, complete bool) {
	t.Helper()
	d := &checkpointd.Document{SchemaVersion: 1, RunID: w.run.ID, FencingToken: w.run.FencingToken, Role: "author", Stage: "implementing",
		Identity:  &checkpointd.Identity{Runtime: "claude-code"},
		Target:    &checkpointd.Target{Repo: repo, PR: 34},
		Workspace: &checkpointd.Workspace{Branch: "fix-12", Head: head},
		Recovery:  &checkpointd.Recovery{Instructions: "git fetch"}}
	if complete {
		d.NextAction = &checkpointd.NextAction{Action: "run the tests"}
	}
	if _, err := w.s.WriteCheckpoint(t.Context(), store.CheckpointWrite{SessionID: w.sess.ID, Doc: d, Digest: "hmac-sha256:v1:00"}); err != nil {
		t.Fatal(err)
	}
}

func (w *world) push(t *testing.T, obs checkpointd.Observation) {
	t.Helper()
	w.n++
	obs.Repo, obs.Branch, obs.Source = repo, "fix-12", fmt.Sprintf("webhook:d%d", w.n)
	if _, _, err := w.s.ApplyDelivery(t.Context(), store.DeliveryRecord{ID: fmt.Sprintf("d%d", w.n), Event: "push", Forge: "gitea", Repo: repo},
		[]checkpointd.Observation{obs}); err != nil {
		t.Fatal(err)
	}
	if err := w.s.Settle(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// await waits until sha's statuses are want (state: description part).
func (w *world) await(t *testing.T, sha string, want ...string) []forgetest.CommitStatus {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := w.forge.Statuses(repo, sha)
		if len(got) == len(want) {
			ok := true
			for i, st := range got {
				state, part, _ := strings.Cut(want[i], ": ")
				ok = ok && st.State == state && strings.Contains(st.Description, part) && st.Context == "checkpointd/session" &&
					st.TargetURL == "https://cp.example/ui/sessions/"+w.sess.ID
			}
			if ok {
				return got
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("statuses on %s: %+v, want %q", sha[:7], got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// awaitLast waits until the last status on sha is state, its description
// starting with or containing part. A publisher that started after some
// changes sets only the state they left: what came before is not awaited.
func (w *world) awaitLast(t *testing.T, sha, state, part string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := w.forge.Statuses(repo, sha)
		if n := len(got); n > 0 && got[n-1].State == state && strings.Contains(got[n-1].Description, part) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("statuses on %s: %+v, want %s %q last", sha[:7], got, state, part)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStatusFollowsTheSession: the statuses a pull request's commits go
// through as its branch moves under the agent and the agent catches up, in
// order, one call per change.
func TestStatusFollowsTheSession(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		w := start(t, b, nil)
		w.checkpoint(t, headA, true)
		w.await(t, headA, "pending: unverified")
		w.push(t, checkpointd.Observation{Head: headA})
		w.await(t, headA, "pending: unverified", "success: #1 is complete")
		// Someone pushes B: the live head B and the agent's A both say stale.
		w.push(t, checkpointd.Observation{Head: headB, Before: headA})
		w.await(t, headB, "pending: stale")
		w.await(t, headA, "pending: unverified", "success: #1 is complete", "pending: stale")
		// The agent catches up on B, first incomplete, then complete.
		w.checkpoint(t, headB, false)
		w.await(t, headB, "pending: stale", "pending: missing next_action")
		w.checkpoint(t, headB, true)
		got := w.await(t, headB, "pending: stale", "pending: missing next_action", "success: #3 is complete")
		// The branch is deleted: the agent's head fails.
		w.push(t, checkpointd.Observation{Head: headB, End: checkpointd.RefDeleted})
		w.await(t, headB, "pending: stale", "pending: missing next_action", "success: #3 is complete", "failure: invalidated")
		for _, st := range got {
			t.Logf("%s %s: %s", headB[:7], st.State, st.Description)
		}
		// Nothing changed since: a heartbeat of the run is no new status.
		if _, err := w.s.SeeRun(t.Context(), w.sess.ID, w.run.ID); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
		if n := len(w.forge.Statuses(repo, headB)); n != 4 {
			t.Fatalf("%d statuses on B after a change of nothing, want 4", n)
		}
	})
}

// TestStatusRestartedPublisherDedups: a publisher that starts over (a
// restart, another replica) sets nothing that is already set.
func TestStatusRestartedPublisherDedups(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		w := start(t, b, nil)
		w.push(t, checkpointd.Observation{Head: headA})
		w.checkpoint(t, headA, true)
		w.awaitLast(t, headA, "success", "#1 is complete")
		// The first publisher records what it set once the forge
		// answered, which may be just after the status shows there: wait
		// for the record, then stop it, as a restart would.
		deadline := time.Now().Add(10 * time.Second)
		for {
			st, ok, err := w.s.PostedStatus(t.Context(), repo, headA)
			if err != nil {
				t.Fatal(err)
			}
			if ok && st.State == "success" && strings.Contains(st.Description, "#1 is complete") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the first publisher did not record the status it set: %+v %v", st, ok)
			}
			time.Sleep(5 * time.Millisecond)
		}
		w.stop()
		calls := w.forge.Calls()
		p := &forgestatus.Publisher{Store: w.s, Forge: reconcile.Gitea(w.forge.URL, "", 0), ConsoleURL: "https://cp.example/", Sweep: time.Hour}
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		_ = p.Publish(ctx)
		if n := w.forge.Calls(); n != calls {
			t.Fatalf("a second publisher made %d calls for statuses already set", n-calls)
		}
	})
}

// TestStatusRefused: a status the forge refuses is a durable error, and
// the write that caused it succeeded as always.
func TestStatusRefused(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		w := start(t, b, nil)
		w.forge.Intercept(forgetest.Status("/statuses/", http.StatusForbidden, ""))
		w.checkpoint(t, headA, true)
		deadline := time.Now().Add(10 * time.Second)
		for {
			errs, err := w.s.ListErrors(t.Context(), store.ErrorFilter{Source: checkpointd.ErrorSourceForgeStatus, Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			if len(errs) > 0 {
				if e := errs[0]; e.Code != "forge_status_refused" || e.SessionID != w.sess.ID || !strings.Contains(e.Detail, "403") {
					t.Fatalf("durable error %+v", e)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("no durable error for a refused status")
			}
			time.Sleep(10 * time.Millisecond)
		}
		// Refused is not retried; once the forge takes it, the next change sets it.
		w.forge.Intercept(nil)
		w.push(t, checkpointd.Observation{Head: headA})
		w.awaitLast(t, headA, "success", "#1 is complete")
	})
}

// TestStatusWorstOfTheBranch: an author and a reviewer on one branch give
// one status, the worse of theirs, naming whose it is.
func TestStatusWorstOfTheBranch(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		w := start(t, b, nil)
		w.push(t, checkpointd.Observation{Head: headA})
		w.checkpoint(t, headA, true)
		w.awaitLast(t, headA, "success", "#1 is complete")
		if _, err := w.s.CreateSession(t.Context(), store.NewSession{Repo: repo, Role: "reviewer", PR: 34, Branch: "fix-12",
			Agent: checkpointd.Agent{Runtime: "claude-code", Instance: "host-8/pid-1"}}); err != nil {
			t.Fatal(err)
		}
		w.awaitLast(t, headA, "pending", "reviewer: unverified: no checkpoint written yet")
	})
}

// TestStatusSettlesOnTheLastChange: a burst of validity changes racing the
// publisher (twenty pushes from two goroutines, back and forth between two
// heads, while it reads the feed) ends with the status of the state they
// left, on the head they left.
func TestStatusSettlesOnTheLastChange(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		w := start(t, b, nil)
		w.checkpoint(t, headA, true)
		w.push(t, checkpointd.Observation{Head: headA})
		w.awaitLast(t, headA, "success", "#1 is complete")
		var wg sync.WaitGroup
		var mu sync.Mutex
		for range 2 {
			wg.Go(func() {
				for i := range 10 {
					head, before := headB, headA
					if i%2 == 1 {
						head, before = headA, headB
					}
					mu.Lock() // the delivery ids of w
					w.push(t, checkpointd.Observation{Head: head, Before: before})
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		// The last push put the branch back on A: the agent's A is valid.
		w.awaitLast(t, headA, "success", "#1 is complete")
		sess, err := w.s.GetSession(t.Context(), w.sess.ID)
		if err != nil || sess.Validity != checkpointd.ValidityValid {
			t.Fatalf("session after the pushes: %v %v", sess.Validity, err)
		}
	})
}

// liveRefRace is the real store with something done in the moment a
// publisher has read the sessions and is about to read the live ref.
type liveRefRace struct {
	*store.Store
	armed  atomic.Bool
	before func() error
	err    chan error
}

func (r *liveRefRace) LiveRef(ctx context.Context, sess *checkpointd.Session) (*checkpointd.LiveRef, error) {
	if r.armed.CompareAndSwap(true, false) {
		r.err <- r.before()
	}
	return r.Store.LiveRef(ctx, sess)
}

// TestStatusNeverVouchesForAnUnseenHead: a push lands between the
// publisher's read of a valid session and its read of the branch's live
// head. The new head is no commit the agent has seen: it must not turn
// green, not even for a moment (a branch protection rule may merge it then).
func TestStatusNeverVouchesForAnUnseenHead(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		race := &liveRefRace{err: make(chan error, 1)}
		w := start(t, b, func(p *forgestatus.Publisher) { race.Store = p.Store.(*store.Store); p.Store = race })
		w.push(t, checkpointd.Observation{Head: headA})
		w.checkpoint(t, headA, true)
		w.awaitLast(t, headA, "success", "#1 is complete")
		race.before = func() error {
			obs := checkpointd.Observation{Repo: repo, Branch: "fix-12", Head: headB, Before: headA, Source: "webhook:race"}
			if _, _, err := w.s.ApplyDelivery(context.Background(), store.DeliveryRecord{ID: "race", Event: "push", Forge: "gitea", Repo: repo},
				[]checkpointd.Observation{obs}); err != nil {
				return err
			}
			return w.s.Settle(context.Background())
		}
		race.armed.Store(true)
		w.checkpoint(t, headA, true)
		select {
		case err := <-race.err:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the publisher did not read the live ref after the checkpoint")
		}
		w.await(t, headB, "pending: stale")
		w.awaitLast(t, headA, "pending", "stale")
	})
}
