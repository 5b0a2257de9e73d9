package checkpointd

import (
	"errors"
	"testing"
)

func TestJudgeWrite(t *testing.T) {
	held := map[string]int64{"l1": 7}
	valid := Verdict{ValidityValid, ""}
	judge := func(e WriteEvidence) WriteJudgement {
		t.Helper()
		e.Role = "author"
		j, err := JudgeWrite(e)
		if err != nil {
			t.Fatalf("JudgeWrite: %v", err)
		}
		return j
	}
	j := judge(WriteEvidence{Doc: completeDoc(), Held: held, Current: valid, Live: openRef(headA)})
	if !j.Complete || !j.LeasesHeld || !j.DrainReady || j.Validity != ValidityValid || j.Changed || j.Missing == nil || len(j.Missing) != 0 {
		t.Fatalf("a complete write on the live head: %+v", j)
	}
	j = judge(WriteEvidence{Doc: completeDoc(), Held: map[string]int64{"l1": 6}, Current: valid, Live: openRef(headA)})
	if j.Complete || j.LeasesHeld || j.DrainReady || j.Validity != ValidityLeaseLost || !j.Changed || len(j.Missing) != 1 || j.Missing[0] != "lease:l1" {
		t.Fatalf("a write naming a lease at an old token: %+v", j)
	}
	doc := completeDoc()
	doc.NextAction = nil
	j = judge(WriteEvidence{Doc: doc, Held: held, Current: valid, Live: openRef(headB)})
	if j.Complete || !j.LeasesHeld || j.DrainReady || j.Validity != ValidityStale || !j.Changed {
		t.Fatalf("an incomplete write on another head: %+v", j)
	}
	gone := Verdict{ValidityInvalidated, "branch fix-12 was deleted"}
	j = judge(WriteEvidence{Doc: completeDoc(), Held: held, Current: gone, Live: openRef(headA)})
	if j.Verdict != gone || j.Changed || !j.Complete {
		t.Fatalf("a write to an invalidated session: %+v", j)
	}
}

// TestJudgeWriteBinding: a session takes checkpoints about its own repo
// (in any case) and role only, and says which part is not its own.
func TestJudgeWriteBinding(t *testing.T) {
	doc := completeDoc()
	doc.Target = &Target{Repo: "Acme/Widgets", PR: 3}
	if _, err := JudgeWrite(WriteEvidence{Doc: doc, Repo: "acme/widgets", Role: "author"}); err != nil {
		t.Fatalf("its own repo in another case: %v", err)
	}
	for _, c := range []struct{ repo, role, path string }{
		{"acme/gadgets", "author", "/target/repo"},
		{"acme/widgets", "reviewer", "/role"},
	} {
		_, err := JudgeWrite(WriteEvidence{Doc: doc, Repo: c.repo, Role: c.role})
		var v *ValidationError
		if !errors.As(err, &v) || !errors.Is(err, ErrInvalidCheckpoint) || len(v.Problems) != 1 || v.Problems[0].Path != c.path {
			t.Fatalf("session %s as %s: %v, want one problem at %s", c.repo, c.role, err, c.path)
		}
	}
}
