package api_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/api"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// invalidStage is a write that fails (422) and so must block the drain.
func invalidStage(d map[string]any) { d["stage"] = "no-such-stage" }

// TestDrainWriteFailureDuringVerify: a write that fails while the gate
// waits for the Verifier, and whose failure cannot be recorded, is noted
// in memory and answered before the completion is: the completion must
// not answer 200 — it fails closed (503) until the note is recorded, and
// then the failure blocks (409).
func TestDrainWriteFailureDuringVerify(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		s := storetest.Open(t, b, checkpointd.SystemClock{})
		fs := &failingRecorder{Store: s}
		asked, release := make(chan struct{}), make(chan struct{})
		var h *harness
		var a *agentSession
		ver := &fakeVerifier{verify: func([]string) error {
			close(asked)
			<-release
			h.push(a, drainHeadA) // the forge vouches for the session
			return nil
		}}
		h = newDrainHarness(t, s, fs, func(d *api.Deps) { d.Verifier = ver })
		a = h.agentSession("author", "acme/widgets", "author", "fix-12") // unverified: the gate asks
		h.do("POST", "/v1/drain", h.operator, map[string]any{"reason": "deploy"}).expect(t, 201, "")
		h.checkpoint(a, a.doc(drainHeadA)).expect(t, 201, "")

		done := make(chan response, 1)
		go func() { done <- h.do("POST", "/v1/drain/complete", h.operator, nil) }()
		<-asked
		fs.fail.Store(true)
		h.checkpoint(a, a.doc(drainHeadA, invalidStage)).expect(t, 422, "invalid_checkpoint")
		close(release) // the recorder still cannot record
		r := <-done
		r.expect(t, 503, "store_unavailable")
		fs.fail.Store(false)
		r = h.do("POST", "/v1/drain/complete", h.operator, nil).expect(t, 409, "drain_blocked")
		if bl := r.get("blocking").([]any); len(bl) != 1 || bl[0].(map[string]any)["write_failure"] != "invalid_checkpoint" {
			t.Fatalf("blocking after the recorder is back: %s", r.raw)
		}
	})
}

// decisionWindow is the real store whose first CompleteDrain runs during
// first before deciding, and whose failure recording fails while fail is
// set.
type decisionWindow struct {
	*failingRecorder
	during atomic.Pointer[func()]
}

func (d *decisionWindow) CompleteDrain(ctx context.Context, c store.DrainCompletion) (*checkpointd.Drain, error) {
	if f := d.during.Swap(nil); f != nil {
		(*f)()
	}
	return d.failingRecorder.CompleteDrain(ctx, c)
}

// TestDrainWriteFailureDuringDecision: a write whose failure is noted in
// memory while the store decides either waits for the decision (and is
// answered after it) or makes the decision fail closed: a write answered
// as failed before a completion answered 200 would be a failure the
// completion swallowed.
func TestDrainWriteFailureDuringDecision(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		s := storetest.Open(t, b, checkpointd.SystemClock{})
		dw := &decisionWindow{failingRecorder: &failingRecorder{Store: s}}
		h := newDrainHarness(t, s, dw, nil)
		a := h.agentSession("author", "acme/widgets", "author", "fix-12")
		h.push(a, drainHeadA)
		h.do("POST", "/v1/drain", h.operator, map[string]any{"reason": "deploy"}).expect(t, 201, "")
		h.checkpoint(a, a.doc(drainHeadA)).expect(t, 201, "")

		var writeAnsweredFirst atomic.Bool
		wrote := make(chan response, 1)
		during := func() {
			dw.fail.Store(true)
			go func() { wrote <- h.checkpoint(a, a.doc(drainHeadA, invalidStage)) }()
			select {
			case r := <-wrote:
				writeAnsweredFirst.Store(true)
				wrote <- r
			case <-time.After(time.Second): // it waits for the decision
			}
		}
		dw.during.Store(&during)
		r := h.do("POST", "/v1/drain/complete", h.operator, nil)
		w := <-wrote
		w.expect(t, 422, "invalid_checkpoint")
		if writeAnsweredFirst.Load() && r.status == 200 {
			t.Fatalf("the write failed (422) before the completion answered 200: %s", r.raw)
		}
		if r.status != 200 && r.status != 503 {
			t.Fatalf("completion: %d %s", r.status, r.raw)
		}
	})
}

// afterCommit is the real store that runs after once, right after a
// checkpoint write commits and before it returns.
type afterCommit struct {
	*failingRecorder
	after atomic.Pointer[func()]
}

func (s *afterCommit) WriteCheckpoint(ctx context.Context, w store.CheckpointWrite) (*checkpointd.Checkpoint, error) {
	cp, err := s.failingRecorder.WriteCheckpoint(ctx, w)
	if f := s.after.Swap(nil); err == nil && f != nil {
		(*f)()
	}
	return cp, err
}

// TestDrainWriteFailureAfterConcurrentSuccess: a write that fails, and
// whose failure is noted in memory, between a concurrent write's commit
// and that write's return is not superseded by it: the successful write
// clears only what was noted before it started.
func TestDrainWriteFailureAfterConcurrentSuccess(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		s := storetest.Open(t, b, checkpointd.SystemClock{})
		ac := &afterCommit{failingRecorder: &failingRecorder{Store: s}}
		h := newDrainHarness(t, s, ac, nil)
		a := h.agentSession("author", "acme/widgets", "author", "fix-12")
		h.push(a, drainHeadA)
		h.do("POST", "/v1/drain", h.operator, map[string]any{"reason": "deploy"}).expect(t, 201, "")
		after := func() {
			ac.fail.Store(true)
			h.checkpoint(a, a.doc(drainHeadA, invalidStage)).expect(t, 422, "invalid_checkpoint")
		}
		ac.after.Store(&after)
		h.checkpoint(a, a.doc(drainHeadA)).expect(t, 201, "")
		ac.fail.Store(false)
		r := h.do("POST", "/v1/drain/complete", h.operator, nil).expect(t, 409, "drain_blocked")
		if bl := r.get("blocking").([]any); len(bl) != 1 || bl[0].(map[string]any)["write_failure"] != "invalid_checkpoint" {
			t.Fatalf("blocking: %s", r.raw)
		}
	})
}

// holdingNotes is the real store whose notes of blocked decisions wait
// for release, after saying they started.
type holdingNotes struct {
	*store.Store
	started chan string
	release chan struct{}
}

func (h *holdingNotes) NoteDrainBlocked(ctx context.Context, drainID string) (int, error) {
	h.started <- drainID
	if _, open := <-h.release; !open {
		return 0, nil // the test ended
	}
	return h.Store.NoteDrainBlocked(ctx, drainID)
}

// TestDrainCancelDoesNotWaitForNotes: the notes of a blocked decision
// (one event per active session: seconds at 100k) are written after the
// answer and hold back nothing: the operator's next request on the same
// keep-alive connection — a cancel — is answered while they wait, and
// they are written all the same.
func TestDrainCancelDoesNotWaitForNotes(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		s := storetest.Open(t, b, checkpointd.SystemClock{})
		hold := &holdingNotes{Store: s, started: make(chan string, 1), release: make(chan struct{})}
		h := newDrainHarness(t, s, hold, nil)
		a := h.agentSession("author", "acme/widgets", "author", "fix-12") // never checkpointed: it blocks
		srv := httptest.NewServer(h.handler)
		defer srv.Close()
		defer close(hold.release)
		call := func(path, body string, want int) {
			t.Helper()
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+path, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+h.operator)
			req.Header.Set("Content-Type", "application/json")
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatalf("POST %s: %v", path, err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Fatalf("POST %s: %d, want %d", path, resp.StatusCode, want)
			}
		}
		call("/v1/drain", `{"reason":"deploy"}`, http.StatusCreated)
		// A blocked decision is answered, then noted in the session's log.
		call("/v1/drain/complete", `{}`, http.StatusConflict)
		<-hold.started
		hold.release <- struct{}{}
		for deadline := time.Now().Add(10 * time.Second); !slices.Contains(h.eventKinds(a), checkpointd.EventDrainBlocked); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the blocked decision was not noted in the blocking session's log")
			}
		}
		// The next decision's notes wait; the cancel after it does not.
		call("/v1/drain/complete", `{}`, http.StatusConflict)
		<-hold.started
		call("/v1/drain/cancel", `{}`, http.StatusOK)
	})
}
