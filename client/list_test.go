package client_test

import (
	"net/http"
	"slices"
	"testing"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/client"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestListPages walks lists of several pages: one page at a time by
// cursor, and all of them through the iterator, which stops when told.
func TestListPages(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		d := newDaemon(t, b)
		ctx := t.Context()
		count := &counter{method: http.MethodGet, prefix: "/v1/sessions"}
		agent := d.client(t, d.agent, via(count.transport()))
		var want []string
		var first *client.SessionCreated
		for range 7 {
			s := newSession(t, agent)
			want = append(want, s.Session.ID)
			if first == nil {
				first = s
			}
		}
		slices.Reverse(want) // newest first

		var paged []string
		opts := client.SessionListOptions{Repo: "acme/widgets", ListOptions: client.ListOptions{Limit: 3}}
		for pages := 1; ; pages++ {
			p, err := agent.Sessions().List(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range p.Items {
				paged = append(paged, s.ID)
			}
			if p.NextCursor == "" {
				if pages != 3 {
					t.Errorf("%d pages of 3 for 7 sessions, want 3", pages)
				}
				break
			}
			opts.Cursor = p.NextCursor
		}
		if !slices.Equal(paged, want) {
			t.Errorf("paged %v, want %v", paged, want)
		}

		count.n.Store(0)
		var all []string
		for s, err := range agent.Sessions().All(ctx, client.SessionListOptions{Repo: "acme/widgets", ListOptions: client.ListOptions{Limit: 3}}) {
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, s.ID)
		}
		if !slices.Equal(all, want) {
			t.Errorf("All %v, want %v", all, want)
		}
		if n := count.n.Load(); n != 3 {
			t.Errorf("All read %d pages, want 3", n)
		}

		// Stopping early reads no further page.
		count.n.Store(0)
		for range agent.Sessions().All(ctx, client.SessionListOptions{ListOptions: client.ListOptions{Limit: 3}}) {
			break
		}
		if n := count.n.Load(); n != 1 {
			t.Errorf("a loop stopped at the first item read %d pages", n)
		}

		// The filters reach the daemon: an ended session is not active.
		if _, err := agent.Sessions().End(ctx, first.Session.ID, &client.EndRequest{RunID: first.Run.ID, Outcome: checkpointd.OutcomeAbandoned}); err != nil {
			t.Fatal(err)
		}
		var ended []string
		for s, err := range agent.Sessions().All(ctx, client.SessionListOptions{State: checkpointd.SessionEnded}) {
			if err != nil {
				t.Fatal(err)
			}
			ended = append(ended, s.ID)
		}
		if !slices.Equal(ended, []string{first.Session.ID}) {
			t.Errorf("ended %v, want [%s]", ended, first.Session.ID)
		}

		// An error is yielded once, and ends the walk.
		var errs int
		for _, err := range agent.Sessions().All(ctx, client.SessionListOptions{Validity: "nonsense"}) {
			if err == nil {
				t.Fatal("a bad filter yielded an item")
			}
			expectCode(t, err, http.StatusUnprocessableEntity, "invalid_request")
			errs++
		}
		if errs != 1 {
			t.Errorf("%d errors yielded, want 1", errs)
		}

		// A checkpoint history of several pages, newest first.
		s := newSession(t, agent)
		for _, stage := range []string{"planned", "implementing", "testing", "review_requested", "reviewing"} {
			if _, err := agent.Checkpoints().Write(ctx, s.Session.ID, doc(s.Run, stage), nil); err != nil {
				t.Fatal(err)
			}
		}
		var seqs []int64
		for cp, err := range agent.Checkpoints().All(ctx, s.Session.ID, client.ListOptions{Limit: 2}) {
			if err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, cp.Seq)
		}
		if !slices.Equal(seqs, []int64{5, 4, 3, 2, 1}) {
			t.Errorf("history %v, want 5..1", seqs)
		}
	})
}
