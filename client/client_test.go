package client_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/client"
	"github.com/checkpointd/checkpointd/store/storetest"
)

func TestNewRefusesBadAddress(t *testing.T) {
	for _, addr := range []string{"", "localhost:8080", "ftp://host", "http://", "http://h/?q=1"} {
		if _, err := client.New(client.Config{Address: addr}); err == nil {
			t.Errorf("New(%q) accepted", addr)
		}
	}
	c, err := client.New(client.Config{Address: "http://127.0.0.1:1/prefix/"})
	if err != nil || c.Address() != "http://127.0.0.1:1/prefix" {
		t.Fatalf("New: %v, address %q", err, c.Address())
	}
}

// TestSessionsAndCheckpoints drives every session and checkpoint method
// against the real daemon.
func TestSessionsAndCheckpoints(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		d := newDaemon(t, b)
		ctx := t.Context()
		agent, op, reader := d.client(t, d.agent), d.client(t, d.operator), d.client(t, d.reader)

		if err := agent.Health(ctx); err != nil {
			t.Fatal(err)
		}
		if err := agent.Ready(ctx); err != nil {
			t.Fatal(err)
		}
		schema, err := reader.Schema(ctx, 0)
		if err != nil || !json.Valid(schema) {
			t.Fatalf("schema: %v %s", err, schema)
		}
		if doc, err := reader.OpenAPI(ctx); err != nil || !strings.HasPrefix(string(doc), "openapi: 3") {
			t.Fatalf("openapi: %v %.40q", err, doc)
		}
		_, err = reader.Schema(ctx, 99)
		expectCode(t, err, http.StatusNotFound, "not_found")

		s := newSession(t, agent)
		if s.Replayed || s.IdempotencyKey == "" || s.Run == nil || s.Run.FencingToken < 1 {
			t.Fatalf("created %+v", s)
		}
		id, run := s.Session.ID, s.Run

		fc, err := reader.Fleet(ctx)
		if err != nil || fc.TotalActive != 1 || fc.Active[checkpointd.ValidityUnverified] != 1 || fc.ByLiveness["live"] != 1 {
			t.Fatalf("fleet: %v %+v", err, fc)
		}
		if page, err := reader.Sessions().List(ctx, client.SessionListOptions{Branch: s.Session.Branch}); err != nil || len(page.Items) != 1 {
			t.Fatalf("by branch %q: %v %+v", s.Session.Branch, err, page)
		}

		got, err := reader.Sessions().Get(ctx, id)
		if err != nil || got.ID != id || got.CurrentRun.ID != run.ID {
			t.Fatalf("get: %v %+v", err, got)
		}
		page, err := reader.Sessions().List(ctx, client.SessionListOptions{State: checkpointd.SessionActive, Repo: "acme/widgets"})
		if err != nil || len(page.Items) != 1 || page.Items[0].ID != id || page.NextCursor != "" {
			t.Fatalf("list: %v %+v", err, page)
		}

		w, err := agent.Checkpoints().Write(ctx, id, doc(run, "implementing"), nil)
		if err != nil || w.Checkpoint.Seq != 1 || w.Replayed || !w.Checkpoint.Complete {
			t.Fatalf("write: %v %+v", err, w)
		}
		raw, _ := json.Marshal(doc(run, "testing"))
		w2, err := agent.Checkpoints().WriteRaw(ctx, id, raw, &client.WriteOptions{IdempotencyKey: "ck-2"})
		if err != nil || w2.Checkpoint.Seq != 2 || w2.IdempotencyKey != "ck-2" {
			t.Fatalf("write raw: %v %+v", err, w2)
		}
		one, err := reader.Checkpoints().Get(ctx, id, 1)
		if err != nil || one.Seq != 1 || one.Stage != "implementing" || one.Validity != checkpointd.ValiditySuperseded {
			t.Fatalf("get 1: %v %+v", err, one)
		}
		latest, err := reader.Checkpoints().Latest(ctx, id)
		if err != nil || latest.Seq != 2 || latest.Stage != "testing" {
			t.Fatalf("latest: %v %+v", err, latest)
		}
		hist, err := reader.Checkpoints().List(ctx, id, client.ListOptions{})
		if err != nil || len(hist.Items) != 2 || hist.Items[0].Seq != 2 {
			t.Fatalf("history: %v %+v", err, hist)
		}

		if err := d.push(head1); err != nil {
			t.Fatal(err)
		}
		hb, err := agent.Sessions().Heartbeat(ctx, id, run.ID)
		if err != nil || hb.ID != run.ID || hb.Live == nil || !*hb.Live || hb.LastSeenAt == nil {
			t.Fatalf("heartbeat: %v %+v", err, hb)
		}
		v, err := agent.Sessions().Resume(ctx, id, run.ID)
		if err != nil || !v.Resumable || v.Validity != checkpointd.ValidityValid || v.Checkpoint.Seq != 2 || v.Run.ID != run.ID {
			t.Fatalf("resume: %v %+v", err, v)
		}

		_, err = agent.Sessions().StartRun(ctx, id, &client.StartRunRequest{Agent: testAgent})
		expectCode(t, err, http.StatusConflict, "run_active")
		held, err := agent.Leases().Acquire(ctx, &client.AcquireRequest{SessionID: id, RunID: run.ID, TTLSeconds: 600,
			Resource: checkpointd.Resource{Kind: checkpointd.ResourcePR, Repo: "acme/widgets", Number: 7}})
		if err != nil {
			t.Fatal(err)
		}
		taken, err := agent.Sessions().Takeover(ctx, id, "the first run died", testAgent)
		if err != nil || taken.Run.FencingToken <= run.FencingToken || taken.Run.TakeoverReason != "the first run died" {
			t.Fatalf("takeover: %v %+v", err, taken)
		}
		run2 := taken.Run
		// The answer hands back the moved lease with its new token, which
		// makes the new run's checkpoint complete.
		if len(taken.Leases) != 1 || taken.Leases[0].ID != held.ID || taken.Leases[0].Holder.RunID != run2.ID ||
			taken.Leases[0].FencingToken <= held.FencingToken {
			t.Fatalf("takeover leases %+v, want %s moved to %s under a token above %d", taken.Leases, held.ID, run2.ID, held.FencingToken)
		}
		named := doc(run2, "testing")
		named.Leases = []checkpointd.LeaseRef{{LeaseID: held.ID, FencingToken: taken.Leases[0].FencingToken}}
		if w, err := agent.Checkpoints().Write(ctx, id, named, nil); err != nil || !w.Checkpoint.Complete {
			t.Fatalf("a checkpoint naming the moved lease: %v %+v", err, w)
		}
		_, err = agent.Sessions().Heartbeat(ctx, id, run.ID)
		expectCode(t, err, http.StatusConflict, "run_superseded")

		parked, err := op.Sessions().Park(ctx, id, "stuck in a loop")
		if err != nil || !parked.Parked || parked.CurrentRun != nil {
			t.Fatalf("park: %v %+v", err, parked)
		}
		// A claim naming the parked run loses; one for "no run" wins.
		_, err = agent.Sessions().StartRun(ctx, id, &client.StartRunRequest{Takeover: true, IfRun: client.IfRunIs(run2.ID), Agent: testAgent})
		expectCode(t, err, http.StatusConflict, "run_changed")
		claimed, err := agent.Sessions().StartRun(ctx, id, &client.StartRunRequest{Takeover: true, IfRun: client.IfRunIs(""), Agent: testAgent})
		if err != nil || claimed.Run.FencingToken <= run2.FencingToken || len(claimed.Leases) != 1 {
			t.Fatalf("claim after park: %v %+v", err, claimed)
		}
		run3 := claimed.Run
		_, err = agent.Sessions().StartRun(ctx, id, &client.StartRunRequest{Takeover: true, IfRun: client.IfRunIs(""), Agent: testAgent})
		expectCode(t, err, http.StatusConflict, "run_changed")

		ev, err := reader.Sessions().Events(ctx, id, client.EventListOptions{ListOptions: client.ListOptions{Limit: 2}})
		if err != nil || len(ev.Items) != 2 || ev.NextCursor == "" || ev.Items[0].Kind != checkpointd.EventSessionCreated {
			t.Fatalf("events: %v %+v", err, ev)
		}
		var kinds []string
		for e, err := range reader.Sessions().AllEvents(ctx, id, client.EventListOptions{After: 1, ListOptions: client.ListOptions{Limit: 2}}) {
			if err != nil {
				t.Fatal(err)
			}
			if e.Seq <= 1 {
				t.Errorf("event %d at or before after=1", e.Seq)
			}
			kinds = append(kinds, e.Kind)
		}
		if len(kinds) < 5 {
			t.Errorf("events after 1: %v", kinds)
		}

		ended, err := agent.Sessions().End(ctx, id, &client.EndRequest{RunID: run3.ID, Outcome: checkpointd.OutcomeCompleted})
		if err != nil || ended.State != checkpointd.SessionEnded || ended.Outcome != checkpointd.OutcomeCompleted {
			t.Fatalf("end: %v %+v", err, ended)
		}
		if err := op.Sessions().Clear(ctx, id, "test clean-up"); err != nil {
			t.Fatal(err)
		}
		_, err = op.Sessions().Get(ctx, id)
		p := expectCode(t, err, http.StatusGone, "gone")
		if ts := p.Tombstone(); ts == nil || ts.SessionID != id || ts.Reason != "test clean-up" || ts.Kind != checkpointd.TombstoneCleared {
			t.Errorf("tombstone %+v", ts)
		}

		var body json.RawMessage
		if err := reader.Do(ctx, http.MethodGet, "/v1/sessions", nil, nil, &body); err != nil || !json.Valid(body) {
			t.Fatalf("Do: %v %s", err, body)
		}
	})
}

func TestLeases(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		d := newDaemon(t, b)
		ctx := t.Context()
		agent, op := d.client(t, d.agent), d.client(t, d.operator)
		s := newSession(t, agent)
		pr7 := checkpointd.Resource{Kind: checkpointd.ResourcePR, Repo: "acme/widgets", Number: 7}
		l, err := agent.Leases().Acquire(ctx, &client.AcquireRequest{Resource: pr7, SessionID: s.Session.ID, RunID: s.Run.ID, TTLSeconds: 60})
		if err != nil || l.State != checkpointd.LeaseHeld || l.Holder.RunID != s.Run.ID {
			t.Fatalf("acquire: %v %+v", err, l)
		}
		r, err := agent.Leases().Renew(ctx, l.ID, s.Run.ID, 120)
		if err != nil || r.TTLSeconds != 120 || !r.ExpiresAt.After(l.ExpiresAt) {
			t.Fatalf("renew: %v %+v", err, r)
		}

		other := newSession(t, agent)
		_, err = agent.Leases().Acquire(ctx, &client.AcquireRequest{Resource: pr7, SessionID: other.Session.ID, RunID: other.Run.ID, TTLSeconds: 60})
		p := expectCode(t, err, http.StatusConflict, "lease_held")
		if h := p.Holder(); h == nil || h.LeaseID != l.ID || h.RunID != s.Run.ID || h.FencingToken != l.FencingToken {
			t.Errorf("holder %+v, want lease %s of run %s", h, l.ID, s.Run.ID)
		}

		page, err := agent.Leases().List(ctx, client.LeaseListOptions{Repo: "acme/widgets", Kind: checkpointd.ResourcePR, Number: 7})
		if err != nil || len(page.Items) != 1 || page.Items[0].ID != l.ID {
			t.Fatalf("list: %v %+v", err, page)
		}
		var n int
		for got, err := range agent.Leases().All(ctx, client.LeaseListOptions{SessionID: s.Session.ID}) {
			if err != nil || got.ID != l.ID {
				t.Fatalf("all: %v %+v", err, got)
			}
			n++
		}
		if n != 1 {
			t.Errorf("all: %d leases", n)
		}

		if err := agent.Leases().Release(ctx, l.ID, other.Run.ID); err == nil {
			t.Error("a run that does not hold the lease released it")
		}
		if err := agent.Leases().Release(ctx, l.ID, s.Run.ID); err != nil {
			t.Fatal(err)
		}
		_, err = agent.Leases().Renew(ctx, l.ID, s.Run.ID, 0)
		expectCode(t, err, http.StatusConflict, "lease_lost")

		// An operator force-releases without a run.
		l2, err := agent.Leases().Acquire(ctx, &client.AcquireRequest{Resource: pr7, SessionID: other.Session.ID, RunID: other.Run.ID, TTLSeconds: 60})
		if err != nil {
			t.Fatal(err)
		}
		if err := op.Leases().Release(ctx, l2.ID, ""); err != nil {
			t.Fatal(err)
		}
		err = agent.Leases().Release(ctx, l2.ID, "")
		p = expectCode(t, err, http.StatusUnprocessableEntity, "invalid_request")
		if diff := cmp.Diff([]string{"run_id"}, problemPaths(p)); diff != "" {
			t.Errorf("problem paths (-want +got):\n%s", diff)
		}
	})
}

func problemPaths(p *client.Error) []string {
	var paths []string
	for _, pr := range p.Problems {
		paths = append(paths, pr.Path)
	}
	return paths
}
