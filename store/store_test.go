package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func newSession(t *testing.T, s *store.Store, repo string) *checkpointd.Session {
	t.Helper()
	sess, err := s.CreateSession(t.Context(), store.NewSession{
		Repo: repo, Role: "author", Issue: 12, Branch: "fix-12",
		Agent: checkpointd.Agent{Runtime: "claude-code", Instance: "host-7/pid-1"},
	})
	if err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	return sess
}

func doc(run *checkpointd.Run, stage string) *checkpointd.Document {
	return &checkpointd.Document{
		SchemaVersion: 1, RunID: run.ID, FencingToken: run.FencingToken, Role: "author", Stage: stage,
		Identity:   &checkpointd.Identity{Runtime: "claude-code"},
		Target:     &checkpointd.Target{Repo: "Owner/Name", Issue: 12, PR: 34},
		Workspace:  &checkpointd.Workspace{Branch: "fix-12", Head: "0123456789abcdef0123456789abcdef01234567"},
		NextAction: &checkpointd.NextAction{Action: "run tests"},
		Recovery:   &checkpointd.Recovery{Instructions: "git fetch && git checkout fix-12"},
	}
}

func write(ctx context.Context, s *store.Store, sessionID string, d *checkpointd.Document) (*checkpointd.Checkpoint, error) {
	return s.WriteCheckpoint(ctx, store.CheckpointWrite{SessionID: sessionID, Doc: d, Digest: "hmac-sha256:v1:00"})
}

func kinds(t *testing.T, s *store.Store, id string) []string {
	t.Helper()
	evs, err := s.ListEvents(t.Context(), id, 0, 500)
	if err != nil {
		t.Fatalf("ListEvents: %v", err)
	}
	var out []string
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: the log has a gap", i, e.Seq)
		}
		out = append(out, e.Kind)
	}
	return out
}

func TestSessionLifecycle(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		clock := checkpointd.NewManualClock(t0)
		s := storetest.Open(t, b, clock)
		sess := newSession(t, s, "Owner/Name")
		if sess.State != checkpointd.SessionActive || sess.Validity != checkpointd.ValidityUnverified {
			t.Fatalf("new session state %q validity %q", sess.State, sess.Validity)
		}
		if sess.CurrentRun == nil || sess.CurrentRun.FencingToken != 1 {
			t.Fatalf("new session run %+v, want fencing token 1", sess.CurrentRun)
		}
		if !sess.CreatedAt.Equal(t0) {
			t.Errorf("created_at %v, want the injected clock's %v", sess.CreatedAt, t0)
		}
		run1 := sess.CurrentRun

		clock.Advance(time.Second)
		cp1, err := write(ctx, s, sess.ID, doc(run1, "implementing"))
		if err != nil {
			t.Fatalf("write 1: %v", err)
		}
		if cp1.Seq != 1 || cp1.ParentSeq != nil || !cp1.Complete || len(cp1.Missing) != 0 {
			t.Fatalf("first checkpoint seq %d parent %v complete %v missing %v", cp1.Seq, cp1.ParentSeq, cp1.Complete, cp1.Missing)
		}
		d2 := doc(run1, "testing")
		d2.NextAction = nil
		cp2, err := write(ctx, s, sess.ID, d2)
		if err != nil {
			t.Fatalf("write 2: %v", err)
		}
		if cp2.Seq != 2 || cp2.ParentSeq == nil || *cp2.ParentSeq != 1 || cp2.Complete {
			t.Fatalf("second checkpoint seq %d parent %v complete %v", cp2.Seq, cp2.ParentSeq, cp2.Complete)
		}
		if diff := cmp.Diff([]string{"next_action"}, cp2.Missing); diff != "" {
			t.Errorf("missing (-want +got):\n%s", diff)
		}

		got, err := s.GetSession(ctx, sess.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Latest == nil || got.Latest.Seq != 2 || got.Latest.Stage != "testing" || got.PR != 34 {
			t.Fatalf("session after writes: latest %+v pr %d", got.Latest, got.PR)
		}
		latest, err := s.GetCheckpoint(ctx, sess.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		if latest.Seq != 2 || latest.Stage != "testing" || latest.Validity != checkpointd.ValidityUnverified {
			t.Errorf("latest = seq %d stage %q validity %q", latest.Seq, latest.Stage, latest.Validity)
		}
		first, err := s.GetCheckpoint(ctx, sess.ID, 1)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(*doc(run1, "implementing"), first.Document); diff != "" {
			t.Errorf("stored document (-want +got):\n%s", diff)
		}
		if first.Validity != checkpointd.ValiditySuperseded {
			t.Errorf("older checkpoint validity %q, want superseded", first.Validity)
		}
		if _, err := s.GetCheckpoint(ctx, sess.ID, 3); !errors.Is(err, checkpointd.ErrNotFound) {
			t.Errorf("seq 3: err %v, want ErrNotFound", err)
		}

		// Takeover: the old run is fenced off.
		if _, err := s.StartRun(ctx, sess.ID, store.NewRun{}); !errors.Is(err, checkpointd.ErrRunActive) {
			t.Fatalf("start without takeover: %v, want ErrRunActive", err)
		}
		run2, err := s.StartRun(ctx, sess.ID, store.NewRun{Takeover: true, Reason: "crash"})
		if err != nil {
			t.Fatal(err)
		}
		if run2.FencingToken != 2 {
			t.Fatalf("takeover token %d, want 2", run2.FencingToken)
		}
		if _, err := write(ctx, s, sess.ID, doc(run1, "testing")); !errors.Is(err, checkpointd.ErrRunSuperseded) {
			t.Fatalf("write by superseded run: %v, want ErrRunSuperseded", err)
		}
		forged := doc(run2.Run, "testing")
		forged.FencingToken = 1
		if _, err := write(ctx, s, sess.ID, forged); !errors.Is(err, checkpointd.ErrRunSuperseded) {
			t.Fatalf("write with old token: %v, want ErrRunSuperseded", err)
		}
		if _, err := s.EndSession(ctx, sess.ID, run1.ID, checkpointd.OutcomeCompleted); !errors.Is(err, checkpointd.ErrRunSuperseded) {
			t.Fatalf("end by superseded run: %v, want ErrRunSuperseded", err)
		}
		if cp, err := write(ctx, s, sess.ID, doc(run2.Run, "testing")); err != nil || cp.Seq != 3 {
			t.Fatalf("write by new run: %v, %+v", err, cp)
		}
		ended, err := s.EndSession(ctx, sess.ID, run2.ID, checkpointd.OutcomeCompleted)
		if err != nil {
			t.Fatal(err)
		}
		if ended.State != checkpointd.SessionEnded || ended.Outcome != checkpointd.OutcomeCompleted || ended.CurrentRun != nil {
			t.Fatalf("ended session: %+v", ended)
		}
		if _, err := write(ctx, s, sess.ID, doc(run2.Run, "done")); !errors.Is(err, checkpointd.ErrSessionEnded) {
			t.Fatalf("write to ended session: %v, want ErrSessionEnded", err)
		}
		if _, err := s.StartRun(ctx, sess.ID, store.NewRun{Takeover: true}); !errors.Is(err, checkpointd.ErrSessionEnded) {
			t.Fatalf("run on ended session: %v, want ErrSessionEnded", err)
		}
		want := []string{"session.created", "run.started", "checkpoint.written", "checkpoint.written",
			"run.superseded", "run.started", "checkpoint.written", "session.ended"}
		if diff := cmp.Diff(want, kinds(t, s, sess.ID)); diff != "" {
			t.Errorf("event log (-want +got):\n%s", diff)
		}
	})
}

func TestRejectedWritesChangeNothing(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		s := storetest.Open(t, b, checkpointd.NewManualClock(t0))
		sess := newSession(t, s, "owner/name")
		d := doc(sess.CurrentRun, "implementing")
		d.Target.Repo = "other/repo"
		d.Role = "reviewer"
		_, err := write(ctx, s, sess.ID, d)
		var ve *checkpointd.ValidationError
		if !errors.As(err, &ve) || !errors.Is(err, checkpointd.ErrInvalidCheckpoint) || len(ve.Problems) != 2 {
			t.Fatalf("mismatched target: %v, want ErrInvalidCheckpoint with 2 problems", err)
		}
		if _, err := write(ctx, s, "ses_nope", doc(sess.CurrentRun, "x")); !errors.Is(err, checkpointd.ErrNotFound) {
			t.Fatalf("unknown session: %v, want ErrNotFound", err)
		}
		got, _ := s.GetSession(ctx, sess.ID)
		if got.Latest != nil || got.PR != 0 {
			t.Fatalf("rejected write left state behind: latest %+v pr %d", got.Latest, got.PR)
		}
		if diff := cmp.Diff([]string{"session.created", "run.started"}, kinds(t, s, sess.ID)); diff != "" {
			t.Errorf("event log (-want +got):\n%s", diff)
		}
	})
}

func TestConcurrentWritesGetConsecutiveSeqs(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		s := storetest.Open(t, b, checkpointd.SystemClock{})
		sess := newSession(t, s, "owner/name")
		const writers, each = 8, 10
		var wg sync.WaitGroup
		errs := make(chan error, writers*each)
		seqs := make(chan int64, writers*each)
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < each; i++ {
					cp, err := write(ctx, s, sess.ID, doc(sess.CurrentRun, "implementing"))
					if err != nil {
						errs <- err
						continue
					}
					seqs <- cp.Seq
				}
			}()
		}
		wg.Wait()
		close(errs)
		close(seqs)
		for err := range errs {
			t.Errorf("concurrent write: %v", err)
		}
		seen := map[int64]bool{}
		for q := range seqs {
			if seen[q] {
				t.Errorf("seq %d handed out twice", q)
			}
			seen[q] = true
		}
		for q := int64(1); q <= writers*each; q++ {
			if !seen[q] {
				t.Errorf("seq %d missing", q)
			}
		}
		list, err := s.ListCheckpoints(ctx, sess.ID, 0, 500)
		if err != nil || len(list) != writers*each {
			t.Fatalf("stored %d checkpoints (%v), want %d", len(list), err, writers*each)
		}
		if n := len(kinds(t, s, sess.ID)); n != 2+writers*each {
			t.Errorf("%d events, want %d", n, 2+writers*each)
		}
	})
}

func TestConcurrentTakeoversLeaveOneCurrentRun(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		s := storetest.Open(t, b, checkpointd.SystemClock{})
		sess := newSession(t, s, "owner/name")
		const n = 10
		runs := make(chan *checkpointd.Run, n)
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := s.StartRun(ctx, sess.ID, store.NewRun{Takeover: true, Reason: "race"})
				if err != nil {
					t.Errorf("takeover: %v", err)
					return
				}
				runs <- r.Run
			}()
		}
		wg.Wait()
		close(runs)
		tokens := map[int64]bool{}
		var current int
		got, err := s.GetSession(ctx, sess.ID)
		if err != nil {
			t.Fatal(err)
		}
		for r := range runs {
			if tokens[r.FencingToken] {
				t.Errorf("fencing token %d granted twice", r.FencingToken)
			}
			tokens[r.FencingToken] = true
			_, err := write(ctx, s, sess.ID, doc(r, "implementing"))
			if r.ID == got.CurrentRun.ID {
				current++
				if err != nil {
					t.Errorf("current run cannot write: %v", err)
				}
			} else if !errors.Is(err, checkpointd.ErrRunSuperseded) {
				t.Errorf("superseded run %s wrote: %v", r.ID, err)
			}
		}
		if current != 1 || got.CurrentRun.FencingToken != n+1 {
			t.Fatalf("%d current runs, current token %d; want 1 and %d", current, got.CurrentRun.FencingToken, n+1)
		}
	})
}

func TestListSessions(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		s := storetest.Open(t, b, checkpointd.NewManualClock(t0))
		var ids []string
		for i := 0; i < 5; i++ {
			ids = append(ids, newSession(t, s, fmt.Sprintf("acme/r%d", i%2)).ID)
		}
		newSession(t, s, "other/r0")
		page1, err := s.ListSessions(ctx, store.SessionFilter{Repo: "ACME/r0", Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		page2, err := s.ListSessions(ctx, store.SessionFilter{Repo: "acme/r0", Limit: 2, Before: page1[len(page1)-1].ID})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, p := range append(page1, page2...) {
			got = append(got, p.ID)
		}
		if diff := cmp.Diff([]string{ids[4], ids[2], ids[0]}, got); diff != "" {
			t.Errorf("repo pages (-want +got):\n%s", diff)
		}
		scoped, err := s.ListSessions(ctx, store.SessionFilter{Scope: []string{"acme/*"}, Limit: 50})
		if err != nil || len(scoped) != 5 {
			t.Fatalf("scope acme/*: %d sessions (%v), want 5", len(scoped), err)
		}
		none, err := s.ListSessions(ctx, store.SessionFilter{Scope: []string{}, Limit: 50})
		if err != nil || len(none) != 0 {
			t.Fatalf("empty scope: %d sessions (%v), want 0", len(none), err)
		}
		ended, err := s.ListSessions(ctx, store.SessionFilter{State: checkpointd.SessionEnded, Limit: 50})
		if err != nil || len(ended) != 0 {
			t.Fatalf("ended: %d (%v)", len(ended), err)
		}
		stale, err := s.ListSessions(ctx, store.SessionFilter{Validity: checkpointd.ValidityUnverified, Limit: 50})
		if err != nil || len(stale) != 6 {
			t.Fatalf("unverified: %d (%v), want 6", len(stale), err)
		}
	})
}

func TestTokens(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		s := storetest.Open(t, b, checkpointd.NewManualClock(t0))
		secret := checkpointd.NewTokenSecret()
		tok, err := s.CreateToken(ctx, checkpointd.TokenSpec{Name: "ci-agent", Role: checkpointd.RoleAgent, Scope: []string{"acme/*"}}, checkpointd.HashToken(secret))
		if err != nil {
			t.Fatal(err)
		}
		p, err := s.Authenticate(ctx, checkpointd.HashToken(secret))
		if err != nil || p.Role != checkpointd.RoleAgent || p.TokenID != tok.ID {
			t.Fatalf("authenticate: %+v %v", p, err)
		}
		if diff := cmp.Diff([]string{"acme/*"}, p.Scope); diff != "" {
			t.Errorf("scope (-want +got):\n%s", diff)
		}
		if _, err := s.Authenticate(ctx, checkpointd.HashToken("cpd_wrong")); !errors.Is(err, checkpointd.ErrUnauthorized) {
			t.Errorf("unknown token: %v", err)
		}
		if err := s.RevokeToken(ctx, tok.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Authenticate(ctx, checkpointd.HashToken(secret)); !errors.Is(err, checkpointd.ErrUnauthorized) {
			t.Errorf("revoked token: %v", err)
		}
		if err := s.RevokeToken(ctx, tok.ID); !errors.Is(err, checkpointd.ErrNotFound) {
			t.Errorf("revoke twice: %v", err)
		}
		created, err := s.EnsureOperatorToken(ctx, "bootstrap", checkpointd.HashToken("cpd_a"))
		if err != nil || !created {
			t.Fatalf("first EnsureOperatorToken: %v %v", created, err)
		}
		created, err = s.EnsureOperatorToken(ctx, "bootstrap", checkpointd.HashToken("cpd_b"))
		if err != nil || created {
			t.Fatalf("second EnsureOperatorToken created %v (%v), want false", created, err)
		}
		list, err := s.ListTokens(ctx, "", 0)
		if err != nil || len(list) != 2 || list[0].RevokedAt == nil {
			t.Fatalf("ListTokens: %+v %v", list, err)
		}
	})
}

func TestStoreDownIsUnavailable(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		s := storetest.Open(t, b, checkpointd.SystemClock{})
		sess := newSession(t, s, "owner/name")
		s.Close()
		if _, err := write(ctx, s, sess.ID, doc(sess.CurrentRun, "x")); !errors.Is(err, checkpointd.ErrStoreUnavailable) {
			t.Errorf("write on closed store: %v, want ErrStoreUnavailable", err)
		}
		if _, err := s.GetSession(ctx, sess.ID); !errors.Is(err, checkpointd.ErrStoreUnavailable) {
			t.Errorf("read on closed store: %v, want ErrStoreUnavailable", err)
		}
		if err := s.Ready(ctx); !errors.Is(err, checkpointd.ErrStoreUnavailable) {
			t.Errorf("ready on closed store: %v", err)
		}
	})
}

// Claimants of one handoff (if_run): of n conditional takeovers
// naming the same run, exactly one starts a run and the others are
// refused with ErrRunChanged, and likewise for "" on a parked session.
func TestConditionalTakeoversHaveOneWinner(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		s := storetest.Open(t, b, checkpointd.SystemClock{})
		sess := newSession(t, s, "owner/name")
		claim := func(ifRun string) (won []*store.StartedRun, changed int) {
			const n = 8
			var mu sync.Mutex
			var wg sync.WaitGroup
			for range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r, err := s.StartRun(ctx, sess.ID, store.NewRun{Takeover: true, Reason: "claim", IfRun: &ifRun})
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						won = append(won, r)
					case errors.Is(err, checkpointd.ErrRunChanged):
						changed++
					default:
						t.Errorf("claim: %v", err)
					}
				}()
			}
			wg.Wait()
			if len(won) != 1 || changed != n-1 {
				t.Fatalf("if_run %q: %d won, %d refused with run_changed; want 1 and %d", ifRun, len(won), changed, n-1)
			}
			return won, changed
		}
		won, _ := claim(sess.CurrentRun.ID)
		got, err := s.GetSession(ctx, sess.ID)
		if err != nil || got.CurrentRun.ID != won[0].ID {
			t.Fatalf("current run %+v (%v), want the winner %s", got.CurrentRun, err, won[0].ID)
		}
		// The first run is gone now: a claim naming it is refused.
		if _, err := s.StartRun(ctx, sess.ID, store.NewRun{Takeover: true, IfRun: &sess.CurrentRun.ID}); !errors.Is(err, checkpointd.ErrRunChanged) {
			t.Errorf("a claim naming a superseded run: %v, want ErrRunChanged", err)
		}
		none := ""
		if _, err := s.StartRun(ctx, sess.ID, store.NewRun{Takeover: true, IfRun: &none}); !errors.Is(err, checkpointd.ErrRunChanged) {
			t.Errorf(`if_run "" while a run is current: %v, want ErrRunChanged`, err)
		}
		if _, err := s.StartRun(ctx, sess.ID, store.NewRun{IfRun: &none}); !errors.Is(err, checkpointd.ErrInvalidRequest) {
			t.Errorf("if_run without takeover: %v, want ErrInvalidRequest", err)
		}
		if _, err := s.ParkSession(ctx, sess.ID, store.Operator{Name: "op"}, "handoff", nil); err != nil {
			t.Fatal(err)
		}
		won, _ = claim("")
		if got, err := s.GetSession(ctx, sess.ID); err != nil || got.CurrentRun == nil || got.CurrentRun.ID != won[0].ID {
			t.Fatalf("after the claim of the parked session: %+v (%v), want run %s", got, err, won[0].ID)
		}
	})
}
