package store_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestScopeBeforeRunState: a checkpoint write or a lease acquisition whose
// caller's scope does not cover the session is refused as forbidden
// whatever the session's run state: a superseded run, a stale fencing
// token, an ended session or a held resource must not be told to a token
// that may not see the session. In scope, the same requests
// get their state's answer.
func TestScopeBeforeRunState(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		s := storetest.Open(t, b, checkpointd.SystemClock{})
		ctx := t.Context()
		outside := func(string) bool { return false }
		inside := func(repo string) bool { return strings.EqualFold(repo, "owner/name") }

		live := newSession(t, s, "owner/name")
		taken := newSession(t, s, "owner/name")
		oldRun := taken.CurrentRun
		if _, err := s.StartRun(ctx, taken.ID, store.NewRun{Takeover: true}); err != nil {
			t.Fatal(err)
		}
		ended := newSession(t, s, "owner/name")
		if _, err := s.EndSession(ctx, ended.ID, ended.CurrentRun.ID, checkpointd.OutcomeAbandoned); err != nil {
			t.Fatal(err)
		}
		holder := newSession(t, s, "owner/name")
		held := issueLease(7)
		acquire(t, s, holder, held)
		staleToken := doc(live.CurrentRun, "implementing")
		staleToken.FencingToken = 999

		type attempt struct {
			name  string
			run   func(inScope func(string) bool) error
			state error // the answer in scope
		}
		writeAs := func(sessionID string, d *checkpointd.Document) func(func(string) bool) error {
			return func(inScope func(string) bool) error {
				_, err := s.WriteCheckpoint(ctx, store.CheckpointWrite{SessionID: sessionID, Doc: d, Digest: "hmac-sha256:v1:00", InScope: inScope})
				return err
			}
		}
		acquireAs := func(sess *checkpointd.Session, runID string, res checkpointd.Resource) func(func(string) bool) error {
			return func(inScope func(string) bool) error {
				_, err := s.AcquireLease(ctx, store.NewLease{Resource: res, SessionID: sess.ID, RunID: runID, TTL: leaseTTL, InScope: inScope})
				return err
			}
		}
		attempts := []attempt{
			{"write with a stale fencing token", writeAs(live.ID, staleToken), checkpointd.ErrRunSuperseded},
			{"write by a superseded run", writeAs(taken.ID, doc(oldRun, "implementing")), checkpointd.ErrRunSuperseded},
			{"write to an ended session", writeAs(ended.ID, doc(ended.CurrentRun, "implementing")), checkpointd.ErrSessionEnded},
			{"acquire by a superseded run", acquireAs(taken, oldRun.ID, issueLease(1)), checkpointd.ErrRunSuperseded},
			{"acquire for an ended session", acquireAs(ended, ended.CurrentRun.ID, issueLease(1)), checkpointd.ErrSessionEnded},
			{"acquire a held resource", acquireAs(live, live.CurrentRun.ID, held), checkpointd.ErrLeaseHeld},
		}
		for _, a := range attempts {
			t.Run(a.name, func(t *testing.T) {
				before := fmt.Sprint(kinds(t, s, live.ID), kinds(t, s, taken.ID), kinds(t, s, ended.ID), kinds(t, s, holder.ID))
				err := a.run(outside)
				if !errors.Is(err, checkpointd.ErrForbidden) {
					t.Errorf("out of scope: %v, want ErrForbidden", err)
				}
				if err != nil && (strings.Contains(err.Error(), "fencing") || strings.Contains(err.Error(), "ended") || strings.Contains(err.Error(), "held")) {
					t.Errorf("out of scope, the error tells the session's state: %v", err)
				}
				if err := a.run(inside); !errors.Is(err, a.state) {
					t.Errorf("in scope: %v, want %v", err, a.state)
				}
				if after := fmt.Sprint(kinds(t, s, live.ID), kinds(t, s, taken.ID), kinds(t, s, ended.ID), kinds(t, s, holder.ID)); after != before {
					t.Errorf("a refused request changed the event logs: %s → %s", before, after)
				}
			})
		}

		// Still nothing to hide for a session that does not exist: 404 for
		// every caller, as a malformed id is.
		missing := *live.CurrentRun
		_, err := s.WriteCheckpoint(ctx, store.CheckpointWrite{SessionID: "ses_00000000000000000000000000000000",
			Doc: doc(&missing, "implementing"), Digest: "hmac-sha256:v1:00", InScope: outside})
		if !errors.Is(err, checkpointd.ErrNotFound) {
			t.Errorf("write to an unknown session: %v, want ErrNotFound", err)
		}
		_, err = s.AcquireLease(ctx, store.NewLease{Resource: issueLease(1), SessionID: "ses_00000000000000000000000000000000",
			RunID: live.CurrentRun.ID, TTL: leaseTTL, InScope: outside})
		if !errors.Is(err, checkpointd.ErrNotFound) {
			t.Errorf("acquire for an unknown session: %v, want ErrNotFound", err)
		}
	})
}
