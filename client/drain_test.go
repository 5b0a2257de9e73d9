package client_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/client"
	"github.com/checkpointd/checkpointd/reconcile"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestDrain walks the drain gate: start, the header seen by every client,
// the blocking list, a blocked completion with its decision, a completion,
// a cancel.
func TestDrain(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		d := newDaemon(t, b)
		ctx := t.Context()
		op := d.client(t, d.operator)
		count := &counter{method: http.MethodPost, prefix: "/v1/sessions"}
		agent := d.client(t, d.agent, via(count.transport()))
		s := newSession(t, agent)
		if err := d.push(head1); err != nil {
			t.Fatal(err)
		}
		if agent.Draining() {
			t.Fatal("draining before any drain")
		}

		dr, err := op.Drain().Start(ctx, "deploy 1.2")
		if err != nil || dr.State != checkpointd.DrainRunning || !dr.Gating || !op.Draining() {
			t.Fatalf("start: %v %+v, draining %v", err, dr, op.Draining())
		}
		_, err = op.Drain().Start(ctx, "again")
		p := expectCode(t, err, http.StatusConflict, "drain_running")
		if running := p.RunningDrain(); running == nil || running.ID != dr.ID {
			t.Errorf("running drain %+v, want %s", running, dr.ID)
		}

		// The agent learns of the drain from any answer, and a refused
		// create is not retried: draining lasts.
		before := count.n.Load()
		_, err = agent.Sessions().Create(ctx, &client.CreateSessionRequest{Repo: "acme/widgets", Role: "author", Agent: testAgent}, nil)
		expectCode(t, err, http.StatusServiceUnavailable, "draining")
		if n := count.n.Load() - before; n != 1 {
			t.Errorf("a draining create was sent %d times, want 1", n)
		}
		if !agent.Draining() {
			t.Error("the agent's client did not note the drain header")
		}

		st, err := op.Drain().Status(ctx, client.ListOptions{})
		if err != nil || !st.Draining || st.Counts.Active != 1 || st.Counts.Blocking != 1 || len(st.Blocking) != 1 {
			t.Fatalf("status: %v %+v", err, st)
		}
		var blockers []string
		for bl, err := range op.Drain().Blocking(ctx, client.ListOptions{Limit: 1}) {
			if err != nil {
				t.Fatal(err)
			}
			blockers = append(blockers, bl.SessionID)
		}
		if len(blockers) != 1 || blockers[0] != s.Session.ID {
			t.Errorf("blocking %v, want [%s]", blockers, s.Session.ID)
		}

		_, err = op.Drain().Complete(ctx, client.CompleteOptions{Limit: 10})
		p = expectCode(t, err, http.StatusConflict, "drain_blocked")
		bl := p.Blocked()
		if bl == nil || bl.DrainID != dr.ID || bl.Counts.Blocking != 1 || len(bl.Blocking) != 1 ||
			bl.Blocking[0].SessionID != s.Session.ID || bl.DecidedAt.IsZero() {
			t.Fatalf("blocked %+v", bl)
		}

		if _, err := agent.Checkpoints().Write(ctx, s.Session.ID, doc(s.Run, "testing"), nil); err != nil {
			t.Fatal(err)
		}
		done, err := op.Drain().Complete(ctx, client.CompleteOptions{})
		if err != nil || done.State != checkpointd.DrainCompleted {
			t.Fatalf("complete: %v %+v", err, done)
		}

		if _, err := op.Drain().Start(ctx, "deploy 1.3"); err != nil {
			t.Fatal(err)
		}
		cancelled, err := op.Drain().Cancel(ctx)
		if err != nil || cancelled.State != checkpointd.DrainCancelled || op.Draining() {
			t.Fatalf("cancel: %v %+v, draining %v", err, cancelled, op.Draining())
		}
		_, err = op.Drain().Cancel(ctx)
		expectCode(t, err, http.StatusNotFound, "not_found")
		past, err := op.Drain().List(ctx, client.ListOptions{Limit: 1})
		if err != nil || len(past.Items) != 1 || past.Items[0].ID != cancelled.ID || past.NextCursor == "" {
			t.Fatalf("past drains: %v %+v", err, past)
		}
		if _, err := agent.Sessions().Get(ctx, s.Session.ID); err != nil || agent.Draining() {
			t.Errorf("after the cancel: %v, draining %v", err, agent.Draining())
		}
	})
}

func TestReconcileAndErrorLog(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		d := newDaemon(t, b)
		ctx := t.Context()
		op, agent := d.client(t, d.operator), d.client(t, d.agent)
		last, err := op.Reconcile().Last(ctx)
		if err != nil || last != nil {
			t.Fatalf("last before any pass: %v %s", err, last)
		}
		raw, err := op.Reconcile().Run(ctx)
		var rep reconcile.Report
		if err != nil || json.Unmarshal(raw, &rep) != nil || rep.ID == "" {
			t.Fatalf("run: %v %s", err, raw)
		}
		last, err = agent.Reconcile().Last(ctx)
		var lastRep reconcile.Report
		if err != nil || json.Unmarshal(last, &lastRep) != nil || lastRep.ID != rep.ID {
			t.Fatalf("last: %v %s, want pass %s", err, last, rep.ID)
		}
		_, err = agent.Reconcile().Run(ctx)
		expectCode(t, err, http.StatusForbidden, "forbidden")

		// A refused checkpoint write is recorded in the error log.
		s := newSession(t, agent)
		bad := doc(s.Run, "no-such-stage")
		_, err = agent.Checkpoints().Write(ctx, s.Session.ID, bad, nil)
		expectCode(t, err, http.StatusUnprocessableEntity, "invalid_checkpoint")
		page, err := op.ErrorLog().List(ctx, client.ErrorListOptions{Source: checkpointd.ErrorSourceCheckpointWrite})
		if err != nil || len(page.Items) != 1 || page.Items[0].SessionID != s.Session.ID || page.Items[0].Code != "invalid_checkpoint" {
			t.Fatalf("error log: %v %+v", err, page)
		}
		var n int
		for rec, err := range op.ErrorLog().All(ctx, client.ErrorListOptions{Since: page.Items[0].At}) {
			if err != nil {
				t.Fatal(err)
			}
			if rec.ID == page.Items[0].ID {
				n++
			}
		}
		if n != 1 {
			t.Errorf("All since the record's time yielded it %d times", n)
		}
		_, err = op.ErrorLog().List(ctx, client.ErrorListOptions{Source: "nonsense"})
		p := expectCode(t, err, http.StatusUnprocessableEntity, "invalid_request")
		if len(p.Problems) != 1 || p.Problems[0].Path != "source" {
			t.Errorf("problems %+v, want one at source", p.Problems)
		}
	})
}
