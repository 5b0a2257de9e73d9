package checkpointd

import (
	"testing"
	"time"
)

const (
	headA = "9fceb02d0ae598e95dc970b74767f19372d61af8"
	headB = "1111111111111111111111111111111111111111"
)

func openRef(head string) *LiveRef {
	return &LiveRef{Repo: "o/r", Branch: "fix-12", Head: head, State: RefOpen, ObservedAt: time.Unix(1, 0)}
}

func TestRejudge(t *testing.T) {
	valid := Verdict{ValidityValid, ""}
	tests := []struct {
		name        string
		current     Verdict
		e           ValidityEvidence
		want        Validity
		wantChanged bool
	}{
		{"same head stays valid", valid, ValidityEvidence{LeasesHeld: true, Head: headA, Live: openRef(headA)}, ValidityValid, false},
		{"heads compare without case", valid, ValidityEvidence{LeasesHeld: true, Head: "9FCEB02D0AE598E95DC970B74767F19372D61AF8", Live: openRef(headA)}, ValidityValid, false},
		{"another head is stale", valid, ValidityEvidence{LeasesHeld: true, Head: headA, Live: openRef(headB)}, ValidityStale, true},
		{"a lost lease outranks the head", valid, ValidityEvidence{LeasesHeld: false, Head: headA, Live: openRef(headA)}, ValidityLeaseLost, true},
		{"an ended ref outranks a lost lease", valid, ValidityEvidence{LeasesHeld: false, Head: headA,
			Live: &LiveRef{Branch: "fix-12", Head: headA, State: RefDeleted}}, ValidityInvalidated, true},
		{"no observation is unverified", valid, ValidityEvidence{LeasesHeld: true, Head: headA}, ValidityUnverified, true},
		{"an ambiguous observation is no evidence", valid, ValidityEvidence{LeasesHeld: true, Head: headA,
			Live: &LiveRef{Branch: "fix-12", Head: headA, State: RefAmbiguous}}, ValidityUnverified, true},
		{"a placeholder row is no evidence", valid, ValidityEvidence{LeasesHeld: true, Head: headA, Live: &LiveRef{Head: headA}}, ValidityUnverified, true},
		{"no head is unverified", valid, ValidityEvidence{LeasesHeld: true, Live: openRef(headA)}, ValidityUnverified, true},
		{"a new reason for the same validity is a change", Verdict{ValidityUnverified, ReasonNoCheckpoint},
			ValidityEvidence{LeasesHeld: true, Head: headA}, ValidityUnverified, true},
		{"the same reason is none", Verdict{ValidityUnverified, ReasonNoLiveHead},
			ValidityEvidence{LeasesHeld: true, Head: headA}, ValidityUnverified, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, changed := Rejudge(tt.current, tt.e)
			if got.Validity != tt.want || changed != tt.wantChanged {
				t.Fatalf("Rejudge = %+v changed %v, want %s changed %v", got, changed, tt.want, tt.wantChanged)
			}
			if (got.Validity == ValidityValid) != (got.Reason == "") {
				t.Fatalf("verdict %+v: only valid goes without a reason", got)
			}
		})
	}
}

// Invalidated is final: no evidence brings a session back, whatever it is.
func TestRejudgeKeepsInvalidatedFinal(t *testing.T) {
	current := Verdict{ValidityInvalidated, "branch fix-12 was deleted"}
	for _, live := range []*LiveRef{nil, openRef(headA), {State: RefAmbiguous, Head: headA}, {State: RefMerged, PR: 3}} {
		for _, held := range []bool{true, false} {
			got, changed := Rejudge(current, ValidityEvidence{LeasesHeld: held, Head: headA, Live: live, Unanswered: "x"})
			if changed || got != current {
				t.Fatalf("live %+v held %v: Rejudge = %+v changed %v, want it kept", live, held, got, changed)
			}
		}
	}
	if got, changed := Restarted(current, "restart"); changed || got != current {
		t.Fatalf("Restarted = %+v changed %v, want it kept", got, changed)
	}
}

func TestRejudgeUnansweredNamesWhy(t *testing.T) {
	got, _ := Rejudge(Verdict{ValidityValid, ""}, ValidityEvidence{LeasesHeld: true, Head: headA, Unanswered: "the forge answered 502"})
	if got != (Verdict{ValidityUnverified, "the forge answered 502"}) {
		t.Fatalf("got %+v", got)
	}
	// A lost lease keeps lease_lost: the forge's silence says nothing of it.
	got, _ = Rejudge(Verdict{ValidityLeaseLost, ReasonLeaseLost}, ValidityEvidence{LeasesHeld: false, Unanswered: "the forge answered 502"})
	if got.Validity != ValidityLeaseLost {
		t.Fatalf("got %+v", got)
	}
}

func TestRestarted(t *testing.T) {
	for _, v := range []Validity{ValidityValid, ValidityStale, ValidityLeaseLost} {
		got, changed := Restarted(Verdict{v, "before"}, "restart")
		if !changed || got != (Verdict{ValidityUnverified, "restart"}) {
			t.Fatalf("%s: Restarted = %+v changed %v", v, got, changed)
		}
	}
	if _, changed := Restarted(Verdict{ValidityUnverified, "older"}, "restart"); changed {
		t.Fatal("an unverified session changed at a restart")
	}
}

func TestNextRefState(t *testing.T) {
	open := LiveRef{Head: headA, State: RefOpen}
	tests := []struct {
		name      string
		prev      LiveRef
		o         Observation
		want      LiveRefState
		wantApply bool
	}{
		{"first observation", LiveRef{}, Observation{Branch: "b", Head: headA, Before: headB}, RefOpen, true},
		{"a push continuing the head", open, Observation{Branch: "b", Head: headB, Before: headA}, RefOpen, true},
		{"a redelivery of the head held", open, Observation{Branch: "b", Head: headA, Before: headB}, RefOpen, true},
		{"a push from elsewhere is ambiguous", open, Observation{Branch: "b", Head: headB, Before: "2222222222222222222222222222222222222222"}, RefAmbiguous, true},
		{"the forge's answer replaces", open, Observation{Branch: "b", Head: headB, Before: "2222222222222222222222222222222222222222", Authoritative: true}, RefOpen, true},
		{"an end ends", open, Observation{Branch: "b", End: RefDeleted}, RefDeleted, true},
		{"a push recreates a deleted branch", LiveRef{Head: headA, State: RefDeleted}, Observation{Branch: "b", Head: headB, Before: headA}, RefOpen, true},
		{"a hint does not reopen a merged PR", LiveRef{Head: headA, State: RefMerged}, Observation{PR: 3, Head: headB}, RefMerged, false},
		{"a synchronize does not reopen a closed PR", LiveRef{Head: headA, State: RefClosed}, Observation{PR: 3, Head: headB, Before: headA}, RefClosed, false},
		{"a reopened PR opens", LiveRef{Head: headA, State: RefClosed}, Observation{PR: 3, Head: headA}, RefOpen, true},
		{"the forge reopens a merged PR's ref", LiveRef{Head: headA, State: RefMerged}, Observation{PR: 3, Head: headA, Authoritative: true}, RefOpen, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, apply := NextRefState(tt.prev, tt.o)
			if got != tt.want || apply != tt.wantApply {
				t.Fatalf("NextRefState = %s apply %v, want %s apply %v", got, apply, tt.want, tt.wantApply)
			}
		})
	}
}
