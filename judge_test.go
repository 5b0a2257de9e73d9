package checkpointd

import "testing"

func TestJudgeWrite(t *testing.T) {
	held := map[string]int64{"l1": 7}
	valid := Verdict{ValidityValid, ""}
	j := JudgeWrite(WriteEvidence{Doc: completeDoc(), Held: held, Current: valid, Live: openRef(headA)})
	if !j.Complete || !j.LeasesHeld || !j.DrainReady || j.Validity != ValidityValid || j.Changed || j.Missing == nil || len(j.Missing) != 0 {
		t.Fatalf("a complete write on the live head: %+v", j)
	}
	j = JudgeWrite(WriteEvidence{Doc: completeDoc(), Held: map[string]int64{"l1": 6}, Current: valid, Live: openRef(headA)})
	if j.Complete || j.LeasesHeld || j.DrainReady || j.Validity != ValidityLeaseLost || !j.Changed || len(j.Missing) != 1 || j.Missing[0] != "lease:l1" {
		t.Fatalf("a write naming a lease at an old token: %+v", j)
	}
	doc := completeDoc()
	doc.NextAction = nil
	j = JudgeWrite(WriteEvidence{Doc: doc, Held: held, Current: valid, Live: openRef(headB)})
	if j.Complete || !j.LeasesHeld || j.DrainReady || j.Validity != ValidityStale || !j.Changed {
		t.Fatalf("an incomplete write on another head: %+v", j)
	}
	gone := Verdict{ValidityInvalidated, "branch fix-12 was deleted"}
	j = JudgeWrite(WriteEvidence{Doc: completeDoc(), Held: held, Current: gone, Live: openRef(headA)})
	if j.Verdict != gone || j.Changed || !j.Complete {
		t.Fatalf("a write to an invalidated session: %+v", j)
	}
}
