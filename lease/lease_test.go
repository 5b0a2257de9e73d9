package lease_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/lease"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func TestTTLBounds(t *testing.T) {
	cases := []struct {
		seconds int64
		want    time.Duration // 0: rejected
	}{
		{-1, 0}, {0, 0}, {5, 0}, {9, 0},
		{10, 10 * time.Second}, {60, time.Minute}, {86400, 24 * time.Hour},
		{86401, 0}, {1 << 40, 0}, {1<<63 - 1, 0},
	}
	for _, c := range cases {
		got, err := lease.TTL(c.seconds, "/ttl_seconds")
		if c.want == 0 {
			var ve *checkpointd.ValidationError
			if !errors.As(err, &ve) || !errors.Is(err, checkpointd.ErrInvalidRequest) || ve.Problems[0].Path != "/ttl_seconds" {
				t.Errorf("TTL(%d) = %v, %v; want ErrInvalidRequest at /ttl_seconds", c.seconds, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("TTL(%d) = %v, %v; want %v", c.seconds, got, err, c.want)
		}
	}
}

// fakeStore records what the manager asks of the store.
type fakeStore struct {
	mu       sync.Mutex
	acquired []store.NewLease
	renewed  []time.Duration
	released []string
	// expire answers ExpireLeases calls in turn; past the end it answers 0.
	expire []expireAnswer
	limits []int
	calls  chan int // receives the call number of every ExpireLeases
}

type expireAnswer struct {
	n   int
	err error
}

func (f *fakeStore) AcquireLease(_ context.Context, in store.NewLease) (*checkpointd.Lease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.acquired = append(f.acquired, in)
	return &checkpointd.Lease{ID: "lse_1", Resource: in.Resource}, nil
}

func (f *fakeStore) RenewLease(_ context.Context, id, runID string, ttl time.Duration) (*checkpointd.Lease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.renewed = append(f.renewed, ttl)
	return &checkpointd.Lease{ID: id}, nil
}

func (f *fakeStore) ReleaseLease(_ context.Context, id, runID string, force bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, fmt.Sprintf("%s %s %v", id, runID, force))
	return nil
}

func (f *fakeStore) ExpireLeases(_ context.Context, limit int) (int, error) {
	f.mu.Lock()
	i := len(f.limits)
	f.limits = append(f.limits, limit)
	var a expireAnswer
	if i < len(f.expire) {
		a = f.expire[i]
	}
	f.mu.Unlock()
	if f.calls != nil {
		f.calls <- i
	}
	return a.n, a.err
}

const (
	sessionID = "ses_0192f0c0a0e07c3e8a1b2c3d4e5f6a7b"
	runID     = "run_0192f0c0a0e07c3e8a1b2c3d4e5f6a7b"
)

// TestAcquireValidates: the manager refuses malformed requests with every
// problem at once, before the store sees them.
func TestAcquireValidates(t *testing.T) {
	issue := checkpointd.Resource{Kind: checkpointd.ResourceIssue, Repo: "acme/widgets", Number: 12}
	cases := []struct {
		name  string
		req   lease.Request
		paths []string // nil: accepted
	}{
		{"issue", lease.Request{Resource: issue, SessionID: sessionID, RunID: runID, TTLSeconds: 60}, nil},
		{"pr", lease.Request{Resource: checkpointd.Resource{Kind: checkpointd.ResourcePR, Repo: "acme/widgets", Number: 3}, SessionID: sessionID, RunID: runID, TTLSeconds: 10}, nil},
		{"branch", lease.Request{Resource: checkpointd.Resource{Kind: checkpointd.ResourceBranch, Repo: "acme/widgets", Branch: "feature/x"}, SessionID: sessionID, RunID: runID, TTLSeconds: 86400}, nil},
		{"unknown kind", lease.Request{Resource: checkpointd.Resource{Kind: "commit", Repo: "acme/widgets", Number: 1}, SessionID: sessionID, RunID: runID, TTLSeconds: 60}, []string{"/resource/kind"}},
		{"no kind", lease.Request{Resource: checkpointd.Resource{Repo: "acme/widgets", Number: 1}, SessionID: sessionID, RunID: runID, TTLSeconds: 60}, []string{"/resource/kind"}},
		{"issue without number", lease.Request{Resource: checkpointd.Resource{Kind: checkpointd.ResourceIssue, Repo: "acme/widgets"}, SessionID: sessionID, RunID: runID, TTLSeconds: 60}, []string{"/resource/number"}},
		{"negative number", lease.Request{Resource: checkpointd.Resource{Kind: checkpointd.ResourcePR, Repo: "acme/widgets", Number: -4}, SessionID: sessionID, RunID: runID, TTLSeconds: 60}, []string{"/resource/number"}},
		{"issue with branch", lease.Request{Resource: checkpointd.Resource{Kind: checkpointd.ResourceIssue, Repo: "acme/widgets", Number: 1, Branch: "x"}, SessionID: sessionID, RunID: runID, TTLSeconds: 60}, []string{"/resource/branch"}},
		{"branch without name", lease.Request{Resource: checkpointd.Resource{Kind: checkpointd.ResourceBranch, Repo: "acme/widgets"}, SessionID: sessionID, RunID: runID, TTLSeconds: 60}, []string{"/resource/branch"}},
		{"branch with number", lease.Request{Resource: checkpointd.Resource{Kind: checkpointd.ResourceBranch, Repo: "acme/widgets", Branch: "x", Number: 2}, SessionID: sessionID, RunID: runID, TTLSeconds: 60}, []string{"/resource/number"}},
		{"branch with control character", lease.Request{Resource: checkpointd.Resource{Kind: checkpointd.ResourceBranch, Repo: "acme/widgets", Branch: "x\ny"}, SessionID: sessionID, RunID: runID, TTLSeconds: 60}, []string{"/resource/branch"}},
		{"bad repo", lease.Request{Resource: checkpointd.Resource{Kind: checkpointd.ResourceIssue, Repo: "widgets", Number: 1}, SessionID: sessionID, RunID: runID, TTLSeconds: 60}, []string{"/resource/repo"}},
		{"ttl 0", lease.Request{Resource: issue, SessionID: sessionID, RunID: runID}, []string{"/ttl_seconds"}},
		{"ttl 5", lease.Request{Resource: issue, SessionID: sessionID, RunID: runID, TTLSeconds: 5}, []string{"/ttl_seconds"}},
		{"ttl 86401", lease.Request{Resource: issue, SessionID: sessionID, RunID: runID, TTLSeconds: 86401}, []string{"/ttl_seconds"}},
		{"no session, no run", lease.Request{Resource: issue, TTLSeconds: 60}, []string{"/session_id", "/run_id"}},
		{"everything wrong", lease.Request{Resource: checkpointd.Resource{Kind: "x"}, SessionID: "not an id", TTLSeconds: -1},
			[]string{"/resource/repo", "/resource/kind", "/session_id", "/run_id", "/ttl_seconds"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeStore{}
			m := lease.NewManager(f, nil)
			_, err := m.Acquire(t.Context(), c.req)
			if c.paths == nil {
				if err != nil || len(f.acquired) != 1 {
					t.Fatalf("accepted request: err %v, %d store calls", err, len(f.acquired))
				}
				if got, want := f.acquired[0].TTL, time.Duration(c.req.TTLSeconds)*time.Second; got != want {
					t.Errorf("store asked for TTL %v, want %v", got, want)
				}
				return
			}
			var ve *checkpointd.ValidationError
			if !errors.As(err, &ve) || !errors.Is(err, checkpointd.ErrInvalidRequest) {
				t.Fatalf("err %v, want a ValidationError of ErrInvalidRequest", err)
			}
			var paths []string
			for _, p := range ve.Problems {
				paths = append(paths, p.Path)
			}
			if diff := cmp.Diff(c.paths, paths); diff != "" {
				t.Errorf("problem paths (-want +got):\n%s", diff)
			}
			if len(f.acquired) != 0 {
				t.Errorf("a refused request reached the store")
			}
		})
	}
}

func TestRenewAndReleaseValidate(t *testing.T) {
	f := &fakeStore{}
	m := lease.NewManager(f, nil)
	ctx := t.Context()
	if _, err := m.Renew(ctx, "lse_1", "", 60); !errors.Is(err, checkpointd.ErrInvalidRequest) {
		t.Errorf("renew without a run: %v, want ErrInvalidRequest", err)
	}
	for _, ttl := range []int64{0, 9, 86401} {
		if _, err := m.Renew(ctx, "lse_1", runID, ttl); !errors.Is(err, checkpointd.ErrInvalidRequest) {
			t.Errorf("renew for %d s: %v, want ErrInvalidRequest", ttl, err)
		}
	}
	if len(f.renewed) != 0 {
		t.Fatalf("refused renewals reached the store: %v", f.renewed)
	}
	if _, err := m.Renew(ctx, "lse_1", runID, 90); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]time.Duration{90 * time.Second}, f.renewed); diff != "" {
		t.Errorf("renewals (-want +got):\n%s", diff)
	}
	if err := m.Release(ctx, "lse_1", runID, false); err != nil {
		t.Fatal(err)
	}
	if err := m.Release(ctx, "lse_2", "", true); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"lse_1 " + runID + " false", "lse_2  true"}, f.released); diff != "" {
		t.Errorf("releases (-want +got):\n%s", diff)
	}
}

// TestExpireOnceBatches: ExpireOnce keeps asking for full batches until a
// batch comes back short, and stops at the first error.
func TestExpireOnceBatches(t *testing.T) {
	boom := errors.New("boom")
	cases := []struct {
		name    string
		answers []expireAnswer
		want    int
		calls   int
		err     error
	}{
		{"nothing to do", nil, 0, 1, nil},
		{"one short batch", []expireAnswer{{2, nil}}, 2, 1, nil},
		{"full, full, short", []expireAnswer{{3, nil}, {3, nil}, {1, nil}}, 7, 3, nil},
		{"full, then empty", []expireAnswer{{3, nil}, {0, nil}}, 3, 2, nil},
		{"error after progress", []expireAnswer{{3, nil}, {1, boom}}, 4, 2, boom},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeStore{expire: c.answers}
			m := lease.NewManager(f, nil)
			m.Batch = 3
			n, err := m.ExpireOnce(t.Context())
			if n != c.want || !errors.Is(err, c.err) || (c.err == nil && err != nil) {
				t.Errorf("ExpireOnce = %d, %v; want %d, %v", n, err, c.want, c.err)
			}
			if len(f.limits) != c.calls || slices.ContainsFunc(f.limits, func(l int) bool { return l != 3 }) {
				t.Errorf("store calls with limits %v, want %d calls of 3", f.limits, c.calls)
			}
		})
	}
}

// TestRunKeepsGoingAfterErrors: the worker retries on the next tick after a
// failed pass and returns nil when its context ends.
func TestRunKeepsGoingAfterErrors(t *testing.T) {
	f := &fakeStore{expire: []expireAnswer{{0, errors.New("database gone")}, {2, nil}}, calls: make(chan int)}
	m := lease.NewManager(f, nil)
	m.Interval = time.Millisecond
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	for want := 0; want < 3; want++ {
		select {
		case got := <-f.calls:
			if got != want {
				t.Fatalf("call %d, want %d", got, want)
			}
		case err := <-done:
			t.Fatalf("Run returned %v after %d passes; it must keep going", err, want)
		case <-time.After(10 * time.Second):
			t.Fatalf("no expiry pass %d within 10s", want)
		}
	}
	cancel()
	for {
		select {
		case <-f.calls: // a pass that was already due
		case err := <-done:
			if err != nil {
				t.Fatalf("Run = %v after cancel, want nil", err)
			}
			return
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return after its context ended")
		}
	}
}

// TestManagerOverStore: the manager over a real store, on both backends,
// with an injected clock: bounds enforced before the store, grants renewed
// and released, and ExpireOnce ending every lease past its time across
// several batches with its event and the validity of sessions relying on it.
func TestManagerOverStore(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		clock := checkpointd.NewManualClock(t0)
		s := storetest.Open(t, b, clock)
		m := lease.NewManager(s, nil)
		m.Batch = 2

		const n = 5
		var sessions []*checkpointd.Session
		var grants []*checkpointd.Lease
		for i := range n {
			sess, err := s.CreateSession(ctx, store.NewSession{Repo: "acme/widgets", Role: "author", Agent: checkpointd.Agent{Runtime: "test"}})
			if err != nil {
				t.Fatal(err)
			}
			l, err := m.Acquire(ctx, lease.Request{Resource: checkpointd.Resource{Kind: checkpointd.ResourcePR, Repo: "acme/widgets", Number: int64(i + 1)},
				SessionID: sess.ID, RunID: sess.CurrentRun.ID, TTLSeconds: 30})
			if err != nil {
				t.Fatal(err)
			}
			if !l.ExpiresAt.Equal(t0.Add(30 * time.Second)) {
				t.Fatalf("expires %v, want %v", l.ExpiresAt, t0.Add(30*time.Second))
			}
			sessions, grants = append(sessions, sess), append(grants, l)
		}
		// Session 0 relies on its lease in a checkpoint.
		_, err := s.WriteCheckpoint(ctx, store.CheckpointWrite{SessionID: sessions[0].ID, Digest: "hmac-sha256:v1:00", Doc: &checkpointd.Document{
			SchemaVersion: 1, RunID: sessions[0].CurrentRun.ID, FencingToken: sessions[0].CurrentRun.FencingToken, Role: "author", Stage: "implementing",
			Leases: []checkpointd.LeaseRef{{LeaseID: grants[0].ID, FencingToken: grants[0].FencingToken}}}})
		if err != nil {
			t.Fatal(err)
		}
		// Session 4 renews; session 3 releases.
		clock.Advance(20 * time.Second)
		if _, err := m.Renew(ctx, grants[4].ID, sessions[4].CurrentRun.ID, 60); err != nil {
			t.Fatal(err)
		}
		if err := m.Release(ctx, grants[3].ID, sessions[3].CurrentRun.ID, false); err != nil {
			t.Fatal(err)
		}
		if n, err := m.ExpireOnce(ctx); err != nil || n != 0 {
			t.Fatalf("ExpireOnce before any expiry: %d, %v", n, err)
		}
		clock.Advance(10 * time.Second)
		if n, err := m.ExpireOnce(ctx); err != nil || n != 3 {
			t.Fatalf("ExpireOnce: %d, %v; want 3 in batches of 2", n, err)
		}
		var states []string
		for _, l := range grants {
			got, err := s.GetLease(ctx, l.ID)
			if err != nil {
				t.Fatal(err)
			}
			states = append(states, string(got.State))
		}
		if diff := cmp.Diff([]string{"expired", "expired", "expired", "released", "held"}, states); diff != "" {
			t.Errorf("lease states (-want +got):\n%s", diff)
		}
		var validity []string
		for _, sess := range sessions {
			got, err := s.GetSession(ctx, sess.ID)
			if err != nil {
				t.Fatal(err)
			}
			validity = append(validity, string(got.Validity))
		}
		if diff := cmp.Diff([]string{"lease_lost", "unverified", "unverified", "unverified", "unverified"}, validity); diff != "" {
			t.Errorf("validity (-want +got):\n%s", diff)
		}
		evs, err := s.ListEvents(ctx, sessions[0].ID, 0, 50)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range evs {
			got = append(got, e.Kind)
		}
		want := []string{"session.created", "run.started", "lease.acquired", "checkpoint.written", "lease.expired", "validity.changed"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("session 0 log (-want +got):\n%s", diff)
		}
		if _, err := m.Renew(ctx, grants[0].ID, sessions[0].CurrentRun.ID, 60); !errors.Is(err, checkpointd.ErrLeaseLost) {
			t.Errorf("renew after the worker expired the lease: %v, want ErrLeaseLost", err)
		}
	})
}
