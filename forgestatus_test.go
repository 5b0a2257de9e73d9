package checkpointd

import (
	"strings"
	"testing"
)

func TestSessionStatus(t *testing.T) {
	complete := &CheckpointSummary{Seq: 4, Complete: true}
	incomplete := &CheckpointSummary{Seq: 5, Missing: []string{"next_action", "lease:l1"}}
	for _, c := range []struct {
		name  string
		s     Session
		state StatusState
		has   string
	}{
		{"valid and complete", Session{State: SessionActive, Validity: ValidityValid, Latest: complete}, StatusSuccess, "#4 is complete"},
		{"valid, incomplete", Session{State: SessionActive, Validity: ValidityValid, Latest: incomplete}, StatusPending, "missing next_action, lease:l1"},
		{"valid, no checkpoint", Session{State: SessionActive, Validity: ValidityValid}, StatusPending, "no checkpoint"},
		{"valid, parked", Session{State: SessionActive, Validity: ValidityValid, Latest: complete, Parked: true}, StatusPending, "parked"},
		{"stale", Session{State: SessionActive, Validity: ValidityStale, ValidityReason: "the live head b differs", Latest: complete}, StatusPending, "stale: the live head b differs"},
		{"unverified", Session{State: SessionActive, Validity: ValidityUnverified, Latest: complete}, StatusPending, "unverified"},
		{"lease lost", Session{State: SessionActive, Validity: ValidityLeaseLost, Latest: complete}, StatusFailure, "lease_lost"},
		{"invalidated", Session{State: SessionActive, Validity: ValidityInvalidated, ValidityReason: "branch fix-12 was deleted"}, StatusFailure, "was deleted"},
		{"completed", Session{State: SessionEnded, Outcome: OutcomeCompleted, Validity: ValidityStale}, StatusSuccess, "completed"},
		{"abandoned", Session{State: SessionEnded, Outcome: OutcomeAbandoned, Validity: ValidityValid, Latest: complete}, StatusPending, "abandoned"},
	} {
		state, why := SessionStatus(&c.s)
		if state != c.state || !strings.Contains(why, c.has) || strings.ContainsAny(why, "\n\t") || len(why) > maxStatusDescription {
			t.Errorf("%s: %s %q, want %s naming %q", c.name, state, why, c.state, c.has)
		}
	}
	long := Session{State: SessionActive, Validity: ValidityStale, ValidityReason: strings.Repeat("é", 100) + "\nsecond line"}
	if _, why := SessionStatus(&long); len(why) > maxStatusDescription || !strings.HasSuffix(why, "…") || !strings.HasPrefix(why, "stale: é") {
		t.Errorf("a long reason: %q (%d bytes)", why, len(why))
	}
	if !StatusFailure.Worse(StatusPending) || !StatusPending.Worse(StatusSuccess) || StatusSuccess.Worse(StatusPending) {
		t.Error("failure > pending > success")
	}
}

func TestValidCommitID(t *testing.T) {
	for s, want := range map[string]bool{
		strings.Repeat("a", 40): true, strings.Repeat("F", 64): true, "0123456789abcdefABCDEF0123456789abcdef01": true,
		strings.Repeat("a", 39): false, strings.Repeat("a", 41): false, strings.Repeat("g", 40): false,
		strings.Repeat("a", 39) + "\x01": false, strings.Repeat("a", 38) + "é": false, "": false,
	} {
		if ValidCommitID(s) != want {
			t.Errorf("ValidCommitID(%q) = %v", s, !want)
		}
	}
}
