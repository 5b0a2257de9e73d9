package api_test

import (
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestReadyzWhileWritesFail is the fault-injection test of /readyz: while
// the database answers reads but fails every write (storetest.FailWrites:
// a full disk's shape on each backend), /readyz answers 503
// store_unavailable with reason write_failed — at once after a failed
// write, and from its own probe write with no traffic — and 200 again once
// writes commit. It used to answer 200 throughout.
func TestReadyzWhileWritesFail(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		url := storetest.URL(t, b)
		h := newHarnessOn(t, storetest.OpenURL(t, url, checkpointd.SystemClock{}))
		id, run, tok := h.newSession()
		h.do("GET", "/readyz", "", nil).expect(t, 200, "")

		restore := storetest.FailWrites(t, b, url)
		h.do("POST", "/v1/sessions/"+id+"/checkpoints", h.agent, checkpointDoc(run, tok)).expect(t, 503, "store_unavailable")
		h.do("GET", "/v1/sessions/"+id, h.reader, nil).expect(t, 200, "") // reads still work
		notReady := func(when string) {
			t.Helper()
			r := h.do("GET", "/readyz", "", nil)
			if r.status != 503 || r.str("code") != "store_unavailable" || r.str("reason") != "write_failed" {
				t.Fatalf("/readyz %s: %d %s, want 503 store_unavailable reason write_failed", when, r.status, r.raw)
			}
		}
		notReady("right after a failed write")
		time.Sleep(1100 * time.Millisecond) // past any cached answer: the probe's own write decides
		notReady("with no traffic")

		restore()
		deadline := time.Now().Add(5 * time.Second)
		for h.do("GET", "/readyz", "", nil).status != 200 {
			if time.Now().After(deadline) {
				t.Fatalf("/readyz still not 200 5s after writes commit again: %s", h.do("GET", "/readyz", "", nil).raw)
			}
			time.Sleep(50 * time.Millisecond)
		}
		h.do("POST", "/v1/sessions/"+id+"/checkpoints", h.agent, checkpointDoc(run, tok)).expect(t, 201, "")
	})
}
