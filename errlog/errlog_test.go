package errlog

import (
	"context"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
)

type countingStore struct{ rows int }

func (s *countingStore) RecordErrors(_ context.Context, recs []checkpointd.ErrorRecord) error {
	s.rows += len(recs)
	return nil
}

// TestRateLimit: a limited source records its burst, then Rate per
// second; an unlimited source records everything.
func TestRateLimit(t *testing.T) {
	st := &countingStore{}
	r := New(st, nil, nil)
	r.Burst, r.Rate = 5, 2
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }
	for range 20 {
		r.Record(t.Context(), checkpointd.ErrorRecord{Source: checkpointd.ErrorSourceWebhook, Code: "bad_signature"})
	}
	if st.rows != 5 {
		t.Fatalf("%d rows after a flood, want the burst of 5", st.rows)
	}
	now = now.Add(time.Second)
	for range 20 {
		r.Record(t.Context(), checkpointd.ErrorRecord{Source: checkpointd.ErrorSourceWebhook, Code: "bad_signature"})
	}
	if st.rows != 7 {
		t.Fatalf("%d rows a second later, want 5+2", st.rows)
	}
	recs := make([]checkpointd.ErrorRecord, 30)
	for i := range recs {
		recs[i] = checkpointd.ErrorRecord{Source: checkpointd.ErrorSourceReconcile, Code: "forge_timeout"}
	}
	r.Record(t.Context(), recs...)
	if st.rows != 37 {
		t.Fatalf("%d rows, want every reconcile row too", st.rows)
	}
	var nilRecorder *Recorder
	nilRecorder.Record(t.Context(), recs...) // records nothing, does not panic
}
