package store_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// fleetDoc is a checkpoint of sess at stage that waits on waitingOn, with
// next_action.actor nextActor.
func fleetDoc(sess *checkpointd.Session, stage, waitingOn, nextActor string) *checkpointd.Document {
	d := drainDoc(sess, "0123456789abcdef0123456789abcdef01234567")
	d.Stage = stage
	d.NextAction.Actor = nextActor
	if waitingOn != "" {
		d.Blocker = &checkpointd.Blocker{Kind: "waiting", WaitingOn: waitingOn}
	}
	return d
}

func listIDs(t *testing.T, s *store.Store, f store.SessionFilter) []string {
	t.Helper()
	if f.Limit == 0 {
		f.Limit = 50
	}
	got, err := s.ListSessions(t.Context(), f)
	if err != nil {
		t.Fatalf("ListSessions %+v: %v", f, err)
	}
	ids := []string{}
	for _, g := range got {
		ids = append(ids, g.ID)
	}
	return ids
}

// TestFleetFieldsFollowTheLatestCheckpoint: stage, waiting_on and
// next_actor are the latest checkpoint's (kept in the clear on the row
// though blocker is sealed), in a session read and a list item alike.
func TestFleetFieldsFollowTheLatestCheckpoint(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		s := storetest.Open(t, b, checkpointd.NewManualClock(t0))
		sess := drainSession(t, s, "acme/widgets", "author", "fix-1")
		check := func(stage, waitingOn, nextActor string) {
			t.Helper()
			got, err := s.GetSession(t.Context(), sess.ID)
			if err != nil {
				t.Fatal(err)
			}
			items, err := s.ListSessions(t.Context(), store.SessionFilter{Limit: 1})
			if err != nil || len(items) != 1 {
				t.Fatalf("list: %v %v", items, err)
			}
			for _, g := range []*checkpointd.Session{got, &items[0]} {
				l := g.Latest
				if diff := cmp.Diff([3]string{stage, waitingOn, nextActor}, [3]string{l.Stage, l.WaitingOn, l.NextActor}); diff != "" {
					t.Errorf("stage, waiting_on, next_actor (-want +got):\n%s", diff)
				}
			}
		}
		mustWrite(t, s, sess, fleetDoc(sess, "blocked", "operator", "operator"))
		check("blocked", "operator", "operator")
		mustWrite(t, s, sess, fleetDoc(sess, "implementing", "", "author"))
		check("implementing", "", "author")
		if got := listIDs(t, s, store.SessionFilter{Stage: "blocked"}); len(got) != 0 {
			t.Errorf("stage=blocked after moving on: %v", got)
		}
		if got := listIDs(t, s, store.SessionFilter{Stage: "implementing"}); len(got) != 1 {
			t.Errorf("stage=implementing: %v", got)
		}
	})
}

// TestSessionLeases: a session lists the leases it holds now — not one
// released, nor one past expires_at before the expiry worker ran — for a
// whole page at once; an ended session holds none.
func TestSessionLeases(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		clock := checkpointd.NewManualClock(t0)
		s := storetest.Open(t, b, clock)
		a := drainSession(t, s, "acme/widgets", "author", "a")
		other := drainSession(t, s, "acme/widgets", "author", "b")
		acquire := func(sess *checkpointd.Session, n int64, ttl time.Duration) *checkpointd.Lease {
			t.Helper()
			l, err := s.AcquireLease(t.Context(), store.NewLease{Resource: checkpointd.Resource{Kind: checkpointd.ResourceIssue,
				Repo: "acme/widgets", Number: n}, SessionID: sess.ID, RunID: sess.CurrentRun.ID, TTL: ttl})
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		long := acquire(a, 1, time.Hour)
		acquire(a, 2, time.Minute) // past expires_at below
		released := acquire(a, 3, time.Hour)
		theirs := acquire(other, 4, time.Hour)
		if err := s.ReleaseLease(t.Context(), released.ID, a.CurrentRun.ID, false); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute) // short is past expires_at; no worker ran
		leases := func(id string) []string {
			t.Helper()
			got, err := s.GetSession(t.Context(), id)
			if err != nil {
				t.Fatal(err)
			}
			ids := []string{}
			for _, l := range got.Leases {
				ids = append(ids, l.ID)
			}
			return ids
		}
		if diff := cmp.Diff([]string{long.ID}, leases(a.ID)); diff != "" {
			t.Errorf("a's leases (-want +got):\n%s", diff)
		}
		items, err := s.ListSessions(t.Context(), store.SessionFilter{Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string][]checkpointd.HeldLease{}
		for _, it := range items {
			got[it.ID] = it.Leases
		}
		want := map[string][]checkpointd.HeldLease{
			a.ID:     {{ID: long.ID, Resource: long.Resource, FencingToken: long.FencingToken, ExpiresAt: long.ExpiresAt}},
			other.ID: {{ID: theirs.ID, Resource: theirs.Resource, FencingToken: theirs.FencingToken, ExpiresAt: theirs.ExpiresAt}},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("listed leases (-want +got):\n%s", diff)
		}
		if _, err := s.EndSessionAs(t.Context(), store.SessionEnd{SessionID: other.ID, RunID: other.CurrentRun.ID,
			Outcome: checkpointd.OutcomeCompleted}); err != nil {
			t.Fatal(err)
		}
		if l := leases(other.ID); len(l) != 0 {
			t.Errorf("ended session holds %v", l)
		}
	})
}

// TestListFilters: every filter of the fleet view, alone and combined,
// with owner/*, live true/false under an injected clock, and the token
// scope on top.
func TestListFilters(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		clock := checkpointd.NewManualClock(t0)
		s := storetest.Open(t, b, clock)
		window := checkpointd.DefaultRunLiveness
		blocked := drainSession(t, s, "acme/widgets", "author", "a")
		mustWrite(t, s, blocked, fleetDoc(blocked, "blocked", "operator", "operator"))
		review := drainSession(t, s, "acme/gadgets", "author", "b")
		mustWrite(t, s, review, fleetDoc(review, "review_requested", "reviewer", "reviewer"))
		elsewhere := drainSession(t, s, "other/widgets", "author", "c")
		mustWrite(t, s, elsewhere, fleetDoc(elsewhere, "blocked", "operator", "operator"))
		parked := drainSession(t, s, "acme/widgets", "author", "d")
		ended := drainSession(t, s, "acme/widgets", "author", "e")
		if _, err := s.EndSessionAs(t.Context(), store.SessionEnd{SessionID: ended.ID, RunID: ended.CurrentRun.ID,
			Outcome: checkpointd.OutcomeAbandoned}); err != nil {
			t.Fatal(err)
		}
		// Everything was heard from at t0; only review's run speaks later.
		clock.Advance(window - time.Minute)
		mustWrite(t, s, review, fleetDoc(review, "review_requested", "reviewer", "reviewer"))
		if _, err := s.ParkSession(t.Context(), parked.ID, store.Operator{Name: "op"}, "test", nil); err != nil {
			t.Fatal(err)
		}
		yes, no := true, false
		// A microsecond before --run-liveness the t0 runs are still live.
		clock.Advance(time.Minute - time.Microsecond)
		if diff := cmp.Diff([]string{elsewhere.ID, review.ID, blocked.ID}, listIDs(t, s, store.SessionFilter{Live: &yes})); diff != "" {
			t.Errorf("live just before the window (-want +got):\n%s", diff)
		}
		clock.Advance(time.Microsecond) // t0 + window: the t0 sightings are unresponsive
		for _, c := range []struct {
			name string
			f    store.SessionFilter
			want []string
		}{
			{"owner/*", store.SessionFilter{Repo: "acme/*"}, []string{ended.ID, parked.ID, review.ID, blocked.ID}},
			{"owner/* any case", store.SessionFilter{Repo: "ACME/*"}, []string{ended.ID, parked.ID, review.ID, blocked.ID}},
			{"owner/* is not a prefix of another owner", store.SessionFilter{Repo: "acm/*"}, []string{}},
			{"repo", store.SessionFilter{Repo: "other/widgets"}, []string{elsewhere.ID}},
			{"stage", store.SessionFilter{Stage: "blocked"}, []string{elsewhere.ID, blocked.ID}},
			{"stage and owner", store.SessionFilter{Stage: "blocked", Repo: "acme/*"}, []string{blocked.ID}},
			{"waiting_on", store.SessionFilter{WaitingOn: "reviewer"}, []string{review.ID}},
			{"waiting_on nobody listed", store.SessionFilter{WaitingOn: "author"}, []string{}},
			{"live", store.SessionFilter{Live: &yes}, []string{review.ID}},
			{"unresponsive", store.SessionFilter{Live: &no}, []string{elsewhere.ID, blocked.ID}},
			{"unresponsive in scope", store.SessionFilter{Live: &no, Scope: []string{"acme/widgets"}}, []string{blocked.ID}},
			{"owner/* outside the scope", store.SessionFilter{Repo: "other/*", Scope: []string{"acme/*"}}, []string{}},
			{"validity and state", store.SessionFilter{State: checkpointd.SessionActive, Validity: checkpointd.ValidityUnverified},
				[]string{parked.ID, elsewhere.ID, review.ID, blocked.ID}},
		} {
			if diff := cmp.Diff(c.want, listIDs(t, s, c.f)); diff != "" {
				t.Errorf("%s (-want +got):\n%s", c.name, diff)
			}
		}
	})
}

// TestSortByActivity: sort=activity lists the most recently heard-from
// first, pages with a cursor that carries the sort key, and a session
// heard from moves to the front.
func TestSortByActivity(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		clock := checkpointd.NewManualClock(t0)
		s := storetest.Open(t, b, clock)
		refresh := checkpointd.SeenRefresh(checkpointd.DefaultRunLiveness)
		var sess []*checkpointd.Session
		for i := range 5 {
			sess = append(sess, drainSession(t, s, "acme/widgets", "author", string(rune('a'+i))))
		}
		// 1 and 3 speak later, 3 last; 0, 2 and 4 tie at t0 (newest first).
		clock.Advance(2 * refresh)
		mustWrite(t, s, sess[1], fleetDoc(sess[1], "implementing", "", ""))
		clock.Advance(2 * refresh)
		if _, err := s.SeeRun(t.Context(), sess[3].ID, sess[3].CurrentRun.ID); err != nil {
			t.Fatal(err)
		}
		walk := func() []string {
			t.Helper()
			var ids []string
			f := store.SessionFilter{State: checkpointd.SessionActive, Sort: store.SortActivity, Limit: 2}
			for range 10 {
				page, err := s.ListSessions(t.Context(), f)
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range page {
					ids = append(ids, p.ID)
				}
				if len(page) < f.Limit {
					return ids
				}
				f.Before, f.BeforeActivity = page[len(page)-1].ID, page[len(page)-1].ActivityAt
			}
			t.Fatal("the walk does not end")
			return nil
		}
		if diff := cmp.Diff([]string{sess[3].ID, sess[1].ID, sess[4].ID, sess[2].ID, sess[0].ID}, walk()); diff != "" {
			t.Errorf("by activity (-want +got):\n%s", diff)
		}
		// A checkpoint within the refresh of the last sighting does not
		// move the recorded one; past it, it does.
		clock.Advance(refresh / 2)
		mustWrite(t, s, sess[3], fleetDoc(sess[3], "implementing", "", ""))
		if got, err := s.GetSession(t.Context(), sess[3].ID); err != nil || !got.ActivityAt.Equal(t0.Add(4*refresh)) ||
			!got.CurrentRun.LastSeenAt.Equal(clock.Now()) {
			t.Errorf("a write within the refresh: recorded sighting %v, last_seen_at %v (%v); want %v and now",
				got.ActivityAt, got.CurrentRun.LastSeenAt, err, t0.Add(4*refresh))
		}
		clock.Advance(2 * refresh)
		mustWrite(t, s, sess[0], fleetDoc(sess[0], "implementing", "", ""))
		if diff := cmp.Diff([]string{sess[0].ID, sess[3].ID, sess[1].ID, sess[4].ID, sess[2].ID}, walk()); diff != "" {
			t.Errorf("after 0 wrote (-want +got):\n%s", diff)
		}
	})
}

// TestFleetCounts: the gauges' read, every validity and liveness present,
// leases held and not expired; the numbers follow a change at once.
func TestFleetCounts(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		clock := checkpointd.NewManualClock(t0)
		s := storetest.Open(t, b, clock)
		window := checkpointd.DefaultRunLiveness
		live := drainSession(t, s, "acme/widgets", "author", "a")
		quiet := drainSession(t, s, "acme/widgets", "author", "b")
		parked := drainSession(t, s, "acme/widgets", "author", "c")
		ended := drainSession(t, s, "acme/widgets", "author", "d")
		for i, sess := range []*checkpointd.Session{live, quiet} {
			if _, err := s.AcquireLease(t.Context(), store.NewLease{Resource: checkpointd.Resource{Kind: checkpointd.ResourceIssue,
				Repo: "acme/widgets", Number: int64(i + 1)}, SessionID: sess.ID, RunID: sess.CurrentRun.ID, TTL: 30 * time.Minute}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.AcquireLease(t.Context(), store.NewLease{Resource: checkpointd.Resource{Kind: checkpointd.ResourceIssue,
			Repo: "acme/widgets", Number: 9}, SessionID: quiet.ID, RunID: quiet.CurrentRun.ID, TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.EndSessionAs(t.Context(), store.SessionEnd{SessionID: ended.ID, RunID: ended.CurrentRun.ID,
			Outcome: checkpointd.OutcomeCompleted}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ParkSession(t.Context(), parked.ID, store.Operator{Name: "op"}, "test", nil); err != nil {
			t.Fatal(err)
		}
		clock.Advance(window)
		mustWrite(t, s, live, fleetDoc(live, "implementing", "", ""))
		got, err := s.FleetCounts(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		want := &checkpointd.FleetCounts{
			Active: map[checkpointd.Validity]int64{checkpointd.ValidityValid: 0, checkpointd.ValidityStale: 0,
				checkpointd.ValidityLeaseLost: 0, checkpointd.ValidityInvalidated: 0, checkpointd.ValidityUnverified: 3},
			ByLiveness: map[string]int64{checkpointd.LivenessLive: 1, checkpointd.LivenessUnresponsive: 1, checkpointd.LivenessParked: 1},
			LeasesHeld: 2, // the 1-minute lease is past expires_at, though no expiry worker ran
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("fleet counts (-want +got):\n%s", diff)
		}
	})
}

// TestEndedKeepsWhyAndWho: an ended session says why it ended and which
// operator ended it (nobody when its own run did), in the session and in
// the list of ended sessions.
func TestEndedKeepsWhyAndWho(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		s := storetest.Open(t, b, checkpointd.NewManualClock(t0))
		byOperator := drainSession(t, s, "acme/widgets", "author", "a")
		byRun := drainSession(t, s, "acme/widgets", "author", "b")
		if _, err := s.EndSessionAs(t.Context(), store.SessionEnd{SessionID: byOperator.ID, Outcome: checkpointd.OutcomeAbandoned,
			Reason: "agent host died", By: &store.Operator{TokenID: "tok_1", Name: "alice"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.EndSessionAs(t.Context(), store.SessionEnd{SessionID: byRun.ID, RunID: byRun.CurrentRun.ID,
			Outcome: checkpointd.OutcomeCompleted, Reason: "merged"}); err != nil {
			t.Fatal(err)
		}
		type why struct{ Outcome, Reason, By string }
		want := map[string]why{
			byOperator.ID: {"abandoned", "agent host died", "alice"},
			byRun.ID:      {"completed", "merged", ""},
		}
		got := map[string]why{}
		for id := range want {
			sess, err := s.GetSession(t.Context(), id)
			if err != nil {
				t.Fatal(err)
			}
			got[id] = why{string(sess.Outcome), sess.EndReason, sess.EndedBy}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("ended sessions (-want +got):\n%s", diff)
		}
		items, err := s.ListSessions(t.Context(), store.SessionFilter{State: checkpointd.SessionEnded, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		listed := map[string]why{}
		for _, it := range items {
			listed[it.ID] = why{string(it.Outcome), it.EndReason, it.EndedBy}
		}
		if diff := cmp.Diff(want, listed); diff != "" {
			t.Errorf("listed ended sessions (-want +got):\n%s", diff)
		}
	})
}

// TestFleetLivenessAgreesWithTheList: a run heard last by a checkpoint
// only (within the refresh, so the write did not move run_seen_at) is live
// until the window passes that checkpoint, in the counts as in the list's
// live filter, at each side of both bounds.
func TestFleetLivenessAgreesWithTheList(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		clock := checkpointd.NewManualClock(t0)
		s := storetest.Open(t, b, clock)
		window := checkpointd.DefaultRunLiveness
		refresh := checkpointd.SeenRefresh(window)
		byCheckpoint := drainSession(t, s, "acme/widgets", "author", "a")
		drainSession(t, s, "acme/widgets", "author", "b") // heard at t0 only
		clock.Advance(refresh / 2)
		mustWrite(t, s, byCheckpoint, fleetDoc(byCheckpoint, "implementing", "", ""))
		for _, tc := range []struct {
			at   time.Duration // after t0
			live int64
		}{
			{window - time.Second, 2},
			{window + refresh/4, 1},
			{window + refresh/2 + time.Second, 0},
		} {
			clock.Advance(t0.Add(tc.at).Sub(clock.Now()))
			got, err := s.FleetCounts(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			live := true
			listed, err := s.ListSessions(t.Context(), store.SessionFilter{State: checkpointd.SessionActive, Live: &live, Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			if got.ByLiveness[checkpointd.LivenessLive] != tc.live || got.ByLiveness[checkpointd.LivenessUnresponsive] != 2-tc.live ||
				int64(len(listed)) != tc.live {
				t.Errorf("at t0+%v: counts %v, %d listed live; want %d live", tc.at, got.ByLiveness, len(listed), tc.live)
			}
		}
	})
}
