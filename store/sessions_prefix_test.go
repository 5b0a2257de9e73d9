package store_test

import (
	"testing"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestSessionsByIDPrefix: the start of an id finds the sessions whose id
// begins with it, and a LIKE wildcard in it matches only itself.
func TestSessionsByIDPrefix(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		s := storetest.Open(t, b, checkpointd.NewManualClock(t0))
		var ids []string
		for range 3 {
			sess, err := s.CreateSession(ctx, store.NewSession{Repo: "acme/widgets", Role: "author", Issue: 1,
				Agent: checkpointd.Agent{Runtime: "claude-code"}})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, sess.ID)
		}
		find := func(prefix string) []string {
			t.Helper()
			got, err := s.ListSessions(ctx, store.SessionFilter{IDPrefix: prefix, Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, g := range got {
				out = append(out, g.ID)
			}
			return out
		}
		if got := find(ids[1]); len(got) != 1 || got[0] != ids[1] {
			t.Errorf("a whole id: %v, want %s", got, ids[1])
		}
		if got := find(ids[2][:len(ids[2])-1]); len(got) != 1 || got[0] != ids[2] {
			t.Errorf("all but its last character: %v, want %s", got, ids[2])
		}
		if got := find("ses_"); len(got) != 3 {
			t.Errorf("ses_: %v, want all 3", got)
		}
		if got := find("se_"); len(got) != 0 {
			t.Errorf("se_ matched %v: _ must match only itself", got)
		}
		if got := find("ses_f"); len(got) != 0 && got[0][4] != 'f' {
			t.Errorf("ses_f: %v", got)
		}
	})
}

// TestLeasesByIDPrefix: the same for leases.
func TestLeasesByIDPrefix(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		s := storetest.Open(t, b, checkpointd.NewManualClock(t0))
		sess := drainSession(t, s, "owner/name", "author", "p")
		var ids []string
		for n := range int64(3) {
			ids = append(ids, acquire(t, s, sess, issueLease(n+1)).ID)
		}
		find := func(prefix string) []string {
			t.Helper()
			got, err := s.ListLeases(ctx, store.LeaseFilter{IDPrefix: prefix, Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, g := range got {
				out = append(out, g.ID)
			}
			return out
		}
		if got := find(ids[1][:20]); len(got) != 1 || got[0] != ids[1] {
			t.Errorf("a short id: %v, want %s", got, ids[1])
		}
		if got := find("lse_"); len(got) != 3 {
			t.Errorf("lse_: %v, want all 3", got)
		}
		if got := find("ls_"); len(got) != 0 {
			t.Errorf("ls_ matched %v: _ must match only itself", got)
		}
	})
}
