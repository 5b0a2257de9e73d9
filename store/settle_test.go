package store_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// pushTo records a push of owner/name fix-12 from → to as delivery id, and
// checks the answer counts what it will change; nothing settles it.
func pushTo(t *testing.T, s *store.Store, id, from, to string, want map[string]int) {
	t.Helper()
	eff, dup, err := s.ApplyDelivery(t.Context(), store.DeliveryRecord{ID: id, Event: "push", Forge: "gitea", Repo: "owner/name"},
		[]checkpointd.Observation{{Repo: "Owner/Name", Branch: "fix-12", Before: from, Head: to, Source: "webhook:" + id}})
	if err != nil || dup {
		t.Fatalf("ApplyDelivery %s: dup %v, %v", id, dup, err)
	}
	if fmt.Sprint(eff.Sessions) != fmt.Sprint(want) {
		t.Fatalf("delivery %s counts %v, want %v", id, eff.Sessions, want)
	}
}

// TestSettledBeforeEveryRead: a push's answer counts the sessions it moves
// but leaves them to Settle; after Settled (which the API calls before
// every answer that reports validity) no read shows the verdict from before
// the push, and the change is in the log with the delivery as evidence.
// Reads alone write nothing: before Settled the session still reads as it
// was (api TestAnswersSettleFirst holds the API to calling it).
func TestSettledBeforeEveryRead(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		s := storetest.Open(t, b, checkpointd.SystemClock{})
		sess := newSession(t, s, "owner/name")
		pushTo(t, s, "d0", "", headA, map[string]int{}) // no checkpoint yet: unverified stays
		if err := s.Settle(ctx); err != nil {
			t.Fatal(err)
		}
		if cp, err := write(ctx, s, sess.ID, doc(sess.CurrentRun, "implementing")); err != nil || cp.Validity != checkpointd.ValidityValid {
			t.Fatalf("checkpoint at the live head: %v, %v", cp, err)
		}

		reads := []struct {
			name string
			read func() (checkpointd.Validity, error)
		}{
			{"GetSession", func() (checkpointd.Validity, error) {
				got, err := s.GetSession(ctx, sess.ID)
				if err != nil {
					return "", err
				}
				return got.Validity, nil
			}},
			{"GetCheckpoint", func() (checkpointd.Validity, error) {
				cp, err := s.GetCheckpoint(ctx, sess.ID, 0)
				if err != nil {
					return "", err
				}
				return cp.Validity, nil
			}},
			{"ListSessions", func() (checkpointd.Validity, error) {
				got, err := s.ListSessions(ctx, store.SessionFilter{Validity: checkpointd.ValidityStale, Limit: 10})
				if err != nil || len(got) == 0 {
					return checkpointd.ValidityValid, err // not listed as stale
				}
				return got[0].Validity, nil
			}},
			{"ListEvents", func() (checkpointd.Validity, error) {
				evs, err := s.ListEvents(ctx, sess.ID, 0, 500)
				if err != nil {
					return "", err
				}
				last := evs[len(evs)-1]
				if last.Kind != checkpointd.EventValidity {
					return checkpointd.ValidityValid, nil
				}
				var data struct {
					To, Source   string
					ObservedHead string `json:"observed_head"`
				}
				if err := json.Unmarshal(last.Data, &data); err != nil {
					return "", err
				}
				if !strings.HasPrefix(data.Source, "webhook:") || data.ObservedHead == "" {
					return "", fmt.Errorf("evidence %s", last.Data)
				}
				return checkpointd.Validity(data.To), nil
			}},
			{"ValiditySummary", func() (checkpointd.Validity, error) {
				counts, _, err := s.ValiditySummary(ctx, 10)
				if err != nil || counts["stale"] == 0 {
					return checkpointd.ValidityValid, err
				}
				return checkpointd.ValidityStale, nil
			}},
		}
		heads := [2]string{headA, headB}
		for i, r := range reads {
			// Each push moves the branch off the checkpoint's head and the
			// next one back onto it; each read comes before any Settle.
			from, to := heads[i%2], heads[(i+1)%2]
			want := checkpointd.ValidityStale
			if to == headA {
				want = checkpointd.ValidityValid
			}
			pushTo(t, s, fmt.Sprintf("d%d", i+1), from, to, map[string]int{string(want): 1})
			if r.name == "ListSessions" || r.name == "ValiditySummary" {
				if want != checkpointd.ValidityStale {
					t.Fatalf("test layout: %s must read a stale push", r.name)
				}
			}
			if before, err := s.GetSession(ctx, sess.ID); err != nil || before.Validity == want {
				t.Fatalf("%s: before Settled the session reads %v (%v): a read settled", r.name, before.Validity, err)
			}
			if err := s.Settled(ctx); err != nil {
				t.Fatal(err)
			}
			got, err := r.read()
			if err != nil {
				t.Fatalf("%s: %v", r.name, err)
			}
			if got != want {
				t.Fatalf("%s after a push to %s read %q, want %q", r.name, to[:7], got, want)
			}
		}
	})
}

// TestSettleOnceOnly: settling twice, or with nothing pending, changes
// nothing and writes no event; a duplicate delivery queues nothing.
func TestSettleOnceOnly(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		s := storetest.Open(t, b, checkpointd.SystemClock{})
		sess := newSession(t, s, "owner/name")
		if err := s.Settle(ctx); err != nil {
			t.Fatalf("Settle with nothing observed: %v", err)
		}
		pushTo(t, s, "d0", "", headA, map[string]int{})
		if _, err := write(ctx, s, sess.ID, doc(sess.CurrentRun, "implementing")); err != nil {
			t.Fatal(err)
		}
		validityEvents := func() int { return strings.Count(strings.Join(kinds(t, s, sess.ID), " "), checkpointd.EventValidity) }
		settledBefore := validityEvents()
		pushTo(t, s, "d1", headA, headB, map[string]int{"stale": 1})
		for range 2 {
			if err := s.Settle(ctx); err != nil {
				t.Fatal(err)
			}
		}
		before := kinds(t, s, sess.ID)
		if n := validityEvents(); n != settledBefore+1 {
			t.Fatalf("log %v: want one more validity change than %d", before, settledBefore)
		}
		_, dup, err := s.ApplyDelivery(ctx, store.DeliveryRecord{ID: "d1", Event: "push", Forge: "gitea", Repo: "owner/name"},
			[]checkpointd.Observation{{Repo: "Owner/Name", Branch: "fix-12", Before: headB, Head: headA, Source: "webhook:d1"}})
		if err != nil || !dup {
			t.Fatalf("redelivery: dup %v, %v", dup, err)
		}
		if err := s.Settle(ctx); err != nil {
			t.Fatal(err)
		}
		if after := kinds(t, s, sess.ID); strings.Join(after, " ") != strings.Join(before, " ") {
			t.Fatalf("log grew from %v to %v", before, after)
		}
		if got, _ := s.GetSession(ctx, sess.ID); got.Validity != checkpointd.ValidityStale {
			t.Fatalf("validity %q after a duplicate, want stale", got.Validity)
		}
	})
}

// TestPushesBeforeASettleCoalesce: two pushes settled together judge the
// sessions once, against the latest live head, with its delivery as the
// evidence: a push that a later one undid leaves no trace in the verdict.
func TestPushesBeforeASettleCoalesce(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		s := storetest.Open(t, b, checkpointd.SystemClock{})
		sess := newSession(t, s, "owner/name")
		pushTo(t, s, "d0", "", headA, map[string]int{})
		if _, err := write(ctx, s, sess.ID, doc(sess.CurrentRun, "implementing")); err != nil {
			t.Fatal(err)
		}
		before := strings.Join(kinds(t, s, sess.ID), " ")
		pushTo(t, s, "d1", headA, headB, map[string]int{"stale": 1})
		pushTo(t, s, "d2", headB, headA, map[string]int{}) // still valid as stored
		if err := s.Settle(ctx); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.GetSession(ctx, sess.ID); got.Validity != checkpointd.ValidityValid {
			t.Fatalf("validity %q, want valid", got.Validity)
		}
		if after := strings.Join(kinds(t, s, sess.ID), " "); after != before {
			t.Fatalf("log went from %v to %v: the undone push left a trace", before, after)
		}
	})
}

// TestDrainCompletionSettlesFirst: a push that moved a ready session's
// branch blocks the drain even when nothing settled it before the
// decision; once the session checkpoints the new head, the drain completes.
func TestDrainCompletionSettlesFirst(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		s := storetest.Open(t, b, checkpointd.SystemClock{})
		sess := newSession(t, s, "owner/name")
		pushTo(t, s, "d0", "", headA, map[string]int{})
		if _, _, err := s.StartDrain(ctx, "deploy", "ops"); err != nil {
			t.Fatal(err)
		}
		if _, err := write(ctx, s, sess.ID, doc(sess.CurrentRun, "implementing")); err != nil {
			t.Fatal(err)
		}
		pushTo(t, s, "d1", headA, headB, map[string]int{"stale": 1})
		d, err := s.CompleteDrain(ctx, store.DrainCompletion{By: "ops", Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if d.Decision == nil || d.Decision.Outcome != checkpointd.DrainOutcomeBlocked || len(d.Decision.Blocking) != 1 {
			t.Fatalf("decision %+v, want blocked by the pushed session", d.Decision)
		}
		next := doc(sess.CurrentRun, "implementing")
		next.Workspace.Head = headB
		if cp, err := write(ctx, s, sess.ID, next); err != nil || cp.Validity != checkpointd.ValidityValid {
			t.Fatalf("checkpoint at the new head: %v, %v", cp, err)
		}
		if d, err := s.CompleteDrain(ctx, store.DrainCompletion{By: "ops", Limit: 10}); err != nil || d.Decision.Outcome != checkpointd.DrainOutcomeCompleted {
			t.Fatalf("decision %+v, %v: want completed", d, err)
		}
	})
}

// TestSettleStoreDown: with the store closed, Settle and the reads that
// settle first answer store_unavailable, never a verdict.
func TestSettleStoreDown(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		s := storetest.Open(t, b, checkpointd.SystemClock{})
		sess := newSession(t, s, "owner/name")
		pushTo(t, s, "d0", "", headA, map[string]int{})
		s.Close()
		if err := s.Settle(ctx); !isUnavailable(err) {
			t.Fatalf("Settle on a closed store: %v", err)
		}
		if _, err := s.GetSession(ctx, sess.ID); !isUnavailable(err) {
			t.Fatalf("GetSession on a closed store: %v", err)
		}
		if _, err := s.CompleteDrain(ctx, store.DrainCompletion{By: "ops", Limit: 10}); !isUnavailable(err) {
			t.Fatalf("CompleteDrain on a closed store: %v", err)
		}
	})
}

func isUnavailable(err error) bool { return errors.Is(err, checkpointd.ErrStoreUnavailable) }

// TestSettleReadsTheHeadAWriteCommits: a checkpoint write holds its session
// when a push commits; the write judged itself against the head before the
// push. The settle that follows must wait for the write and judge the head
// it commits, or the session ends stale at the live head (PostgreSQL: the
// only engine where the two run at once).
func TestSettleReadsTheHeadAWriteCommits(t *testing.T) {
	url := storetest.URL(t, storetest.Postgres)
	s := storetest.OpenURL(t, url, checkpointd.SystemClock{})
	ctx := t.Context()
	sess := newSession(t, s, "owner/name")
	pushTo(t, s, "d0", "", headA, map[string]int{})
	if cp, err := write(ctx, s, sess.ID, doc(sess.CurrentRun, "implementing")); err != nil || cp.Validity != checkpointd.ValidityValid {
		t.Fatalf("checkpoint at the live head: %v, %v", cp, err)
	}
	// The write in flight: it locked the session and moved its head to B,
	// judged against the live head A it read (valid→stale).
	tx := holding(t, url, `UPDATE sessions SET head = $1, validity = 'stale' WHERE id = $2`, headB, sess.ID)
	pushTo(t, s, "d1", headA, headB, map[string]int{"stale": 1}) // counted from the committed head A
	settled := make(chan error, 1)
	go func() { settled <- s.Settle(ctx) }()
	select {
	case err := <-settled:
		t.Fatalf("Settle returned (%v) while a write held the session", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-settled; err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetSession(ctx, sess.ID); got.Validity != checkpointd.ValidityValid {
		t.Fatalf("validity %q (%s): the settle judged the head from before the write", got.Validity, got.ValidityReason)
	}
}

// TestWriteMovingToARefWaitsForItsDelivery: a checkpoint write that moves
// its session onto a branch holds that branch's live state until it
// commits. A push to the branch committed in between would otherwise be
// settled without the session (its committed branch is still the old one)
// while the write's verdict, judged against the state before the push,
// stays. Both when the branch was observed before (the verdict would stay
// valid at a head the branch left) and when the push is its first
// observation (it would stay unverified at the live head). PostgreSQL
// only: SQLite has one writer. The write is held after its live read by a
// lock on its idempotency claim, which it completes last.
func TestWriteMovingToARefWaitsForItsDelivery(t *testing.T) {
	for _, tc := range []struct {
		name     string
		observed bool
		from, to string
		want     checkpointd.Validity
	}{
		{"observed before", true, headA, headB, checkpointd.ValidityStale},
		{"first observation", false, "", headA, checkpointd.ValidityValid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := storetest.URL(t, storetest.Postgres)
			s := storetest.OpenURL(t, url, checkpointd.SystemClock{})
			ctx := t.Context()
			sess, err := s.CreateSession(ctx, store.NewSession{Repo: "owner/name", Role: "author", Issue: 12, Branch: "other",
				Agent: checkpointd.Agent{Runtime: "claude-code"}})
			if err != nil {
				t.Fatal(err)
			}
			if tc.observed {
				pushTo(t, s, "d0", "", headA, map[string]int{})
				if err := s.Settle(ctx); err != nil {
					t.Fatal(err)
				}
			}
			claim, _, err := s.ClaimIdempotency(ctx, sess.ID, "k1", "hmac-sha256:v1:00")
			if err != nil {
				t.Fatal(err)
			}
			hold := holding(t, url, `SELECT 1 FROM idempotency WHERE scope = $1 FOR UPDATE`, sess.ID)
			wrote := make(chan error, 1)
			go func() { // moves the session from "other" to fix-12 at head A
				_, err := s.WriteCheckpoint(ctx, store.CheckpointWrite{SessionID: sess.ID, Doc: doc(sess.CurrentRun, "implementing"),
					Digest: "hmac-sha256:v1:00", Idempotency: &store.Idempotency{Scope: sess.ID, Key: "k1", Claim: claim, Status: 201,
						Render: func(any) ([]byte, error) { return []byte(`{}`), nil }}})
				wrote <- err
			}()
			time.Sleep(300 * time.Millisecond) // the write has read fix-12's live state and waits on its claim
			pushed := make(chan error, 1)
			go func() {
				_, _, err := s.ApplyDelivery(ctx, store.DeliveryRecord{ID: "d1", Event: "push", Forge: "gitea", Repo: "owner/name"},
					[]checkpointd.Observation{{Repo: "owner/name", Branch: "fix-12", Before: tc.from, Head: tc.to, Source: "webhook:d1"}})
				pushed <- err
			}()
			time.Sleep(300 * time.Millisecond)
			if err := s.Settle(ctx); err != nil { // settles the push if it committed: without the session
				t.Fatal(err)
			}
			if err := hold.Commit(); err != nil {
				t.Fatal(err)
			}
			if err := <-wrote; err != nil {
				t.Fatal(err)
			}
			if err := <-pushed; err != nil {
				t.Fatal(err)
			}
			if err := s.Settled(ctx); err != nil {
				t.Fatal(err)
			}
			got, err := s.GetSession(ctx, sess.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.Branch != "fix-12" || got.Validity != tc.want {
				t.Fatalf("session on %q is %q (%s) after a push %s→%s, want %q",
					got.Branch, got.Validity, got.ValidityReason, tc.from, tc.to[:7], tc.want)
			}
		})
	}
}

// TestWriteSettingItsPRDoesNotWaitOnItsBranch: a write that binds its
// session to a PR while staying on its branch holds only the PR's live
// state. Holding the branch's too would deadlock with a settle of that
// branch, which holds the branch's row and waits for the session; the
// database would break the cycle after deadlock_timeout (1 s) and the
// store retry, so the symptom is a write that takes a second. PostgreSQL.
func TestWriteSettingItsPRDoesNotWaitOnItsBranch(t *testing.T) {
	url := storetest.URL(t, storetest.Postgres)
	s := storetest.OpenURL(t, url, checkpointd.SystemClock{})
	ctx := t.Context()
	a, b := newSession(t, s, "owner/name"), newSession(t, s, "owner/name") // on fix-12, no PR
	first, second := a, b                                                  // the settle locks first, then second
	if b.ID < a.ID {
		first, second = b, a
	}
	pushTo(t, s, "d0", "", headA, map[string]int{})
	if err := s.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	pushTo(t, s, "d1", headA, headB, map[string]int{}) // left unsettled
	hold := holding(t, url, `SELECT 1 FROM sessions WHERE id = $1 FOR UPDATE`, first.ID)
	settled := make(chan error, 1)
	go func() { settled <- s.Settle(ctx) }() // holds fix-12's row, waits for first
	time.Sleep(300 * time.Millisecond)
	wrote := make(chan error, 1)
	go func() { _, err := write(ctx, s, second.ID, doc(second.CurrentRun, "implementing")); wrote <- err }() // PR 0 → 34
	time.Sleep(100 * time.Millisecond)
	if err := hold.Commit(); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if err := <-settled; err != nil {
		t.Fatal(err)
	}
	if took := time.Since(released); took > 500*time.Millisecond {
		t.Fatalf("the write and the settle took %v after the lock was released: a deadlock was broken and retried", took)
	}
}

// TestSettleWaitEndsWithTheCaller: a Settled before a read, while another
// settle of this process waits on a row lock, gives up when its own
// context ends: store_unavailable, not a wait as long as the other's.
func TestSettleWaitEndsWithTheCaller(t *testing.T) {
	url := storetest.URL(t, storetest.Postgres)
	s := storetest.OpenURL(t, url, checkpointd.SystemClock{})
	ctx := t.Context()
	newSession(t, s, "owner/name")
	pushTo(t, s, "d0", "", headA, map[string]int{}) // left unsettled
	hold := holding(t, url, `SELECT 1 FROM live_refs FOR UPDATE`)
	settled := make(chan error, 1)
	go func() { settled <- s.Settle(ctx) }() // waits on the row
	time.Sleep(200 * time.Millisecond)
	read := make(chan error, 1)
	go func() {
		rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		read <- s.Settled(rctx)
	}()
	select {
	case err := <-read:
		if !errors.Is(err, checkpointd.ErrStoreUnavailable) {
			t.Fatalf("Settled while settling is held: %v, want store_unavailable", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Settled waited past its deadline for another settle")
	}
	if err := hold.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-settled; err != nil {
		t.Fatal(err)
	}
}

// TestDrainDecisionSeesAPushBetweenSettleAndDecision: a push that commits
// after the completion settled but before it decided is caught inside the
// decision's transaction: the completion settles again and the pushed
// session blocks it. The decision is held at the drain's row by a raw
// transaction while the push commits (PostgreSQL).
func TestDrainDecisionSeesAPushBetweenSettleAndDecision(t *testing.T) {
	url := storetest.URL(t, storetest.Postgres)
	s := storetest.OpenURL(t, url, checkpointd.SystemClock{})
	ctx := t.Context()
	sess := newSession(t, s, "owner/name")
	pushTo(t, s, "d0", "", headA, map[string]int{})
	if _, _, err := s.StartDrain(ctx, "deploy", "ops"); err != nil {
		t.Fatal(err)
	}
	if cp, err := write(ctx, s, sess.ID, doc(sess.CurrentRun, "implementing")); err != nil || !cp.Complete || cp.Validity != checkpointd.ValidityValid {
		t.Fatalf("ready checkpoint: %+v, %v", cp, err)
	}
	hold := holding(t, url, `SELECT 1 FROM drains WHERE is_open = 1 FOR UPDATE`)
	decided := make(chan error, 1)
	var d *checkpointd.Drain
	go func() { // settles (nothing pending), then waits for the drain's row
		var err error
		d, err = s.CompleteDrain(ctx, store.DrainCompletion{By: "ops", Limit: 10})
		decided <- err
	}()
	time.Sleep(300 * time.Millisecond)
	pushTo(t, s, "d1", headA, headB, map[string]int{"stale": 1})
	if err := hold.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-decided; err != nil {
		t.Fatal(err)
	}
	if d.Decision == nil || d.Decision.Outcome != checkpointd.DrainOutcomeBlocked {
		t.Fatalf("decision %+v: a session pushed off its head before the decision did not block it", d.Decision)
	}
}

// TestSettlePagesThroughManyRefs: more refs pending than one listing
// returns are all settled by one call.
func TestSettlePagesThroughManyRefs(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		url := storetest.URL(t, b)
		s := storetest.OpenURL(t, url, checkpointd.SystemClock{})
		var sessions []*checkpointd.Session
		for i := range 150 {
			branch := fmt.Sprintf("b%03d", i)
			sess, err := s.CreateSession(ctx, store.NewSession{Repo: "owner/name", Role: "author", Branch: branch,
				Agent: checkpointd.Agent{Runtime: "claude-code"}})
			if err != nil {
				t.Fatal(err)
			}
			d := doc(sess.CurrentRun, "implementing")
			d.Target.PR, d.Workspace.Branch = 0, branch
			if _, err := write(ctx, s, sess.ID, d); err != nil {
				t.Fatal(err)
			}
			sessions = append(sessions, sess)
			if _, _, err := s.ApplyDelivery(ctx, store.DeliveryRecord{ID: "d" + branch, Event: "push", Forge: "gitea", Repo: "owner/name"},
				[]checkpointd.Observation{{Repo: "owner/name", Branch: branch, Head: headB, Source: "webhook:d" + branch}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Settle(ctx); err != nil {
			t.Fatal(err)
		}
		// Read raw: a store read would settle what was left.
		var pending, stale int
		if err := openRaw(t, b, url).QueryRowContext(ctx, `SELECT
(SELECT COUNT(*) FROM live_refs WHERE version <> settled_version),
(SELECT COUNT(*) FROM sessions WHERE validity = 'stale')`).Scan(&pending, &stale); err != nil {
			t.Fatal(err)
		}
		if pending != 0 || stale != len(sessions) {
			t.Fatalf("after one Settle: %d refs pending, %d sessions stale; want 0 and %d", pending, stale, len(sessions))
		}
	})
}

// holding opens a raw transaction on the PostgreSQL test database at url,
// runs query in it (typically taking row locks a store call will meet) and
// rolls it back at the end of the test unless the test commits it.
func holding(t *testing.T, url, query string, args ...any) *sql.Tx {
	t.Helper()
	tx, err := openRaw(t, storetest.Postgres, url).BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	if _, err := tx.ExecContext(t.Context(), query, args...); err != nil {
		t.Fatal(err)
	}
	return tx
}
