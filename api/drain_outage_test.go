package api_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/api"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// outage makes the store go away at a chosen moment: on PostgreSQL by
// cutting the proxy the store connects through, on SQLite (a file that
// cannot go away) by failing every call of the store. cutAfterAuth makes
// it go away right after the next successful bearer-token lookup: between
// authentication and the write.
type outage struct {
	*store.Store
	proxy        *storetest.Proxy
	down         atomic.Bool
	cutAfterAuth atomic.Bool
}

func (o *outage) goAway() {
	if o.proxy != nil {
		o.proxy.Cut()
	}
	o.down.Store(true)
}

func (o *outage) comeBack() {
	if o.proxy != nil {
		o.proxy.Restore()
	}
	o.down.Store(false)
}

// failing reports whether a call must fail as an unreachable store does
// (SQLite only: on PostgreSQL the proxy does it for real).
func (o *outage) failing() bool { return o.proxy == nil && o.down.Load() }

func (o *outage) Authenticate(ctx context.Context, hash string) (*checkpointd.Principal, error) {
	if o.failing() {
		return nil, errInjected
	}
	p, err := o.Store.Authenticate(ctx, hash)
	if err == nil && o.cutAfterAuth.CompareAndSwap(true, false) {
		o.goAway()
	}
	return p, err
}

func (o *outage) GetSession(ctx context.Context, id string) (*checkpointd.Session, error) {
	if o.failing() {
		return nil, errInjected
	}
	return o.Store.GetSession(ctx, id)
}

func (o *outage) WriteCheckpoint(ctx context.Context, w store.CheckpointWrite) (*checkpointd.Checkpoint, error) {
	if o.failing() {
		return nil, errInjected
	}
	return o.Store.WriteCheckpoint(ctx, w)
}

func (o *outage) ClaimIdempotency(ctx context.Context, scope, key, digest string) (string, *store.Replay, error) {
	if o.failing() {
		return "", nil, errInjected
	}
	return o.Store.ClaimIdempotency(ctx, scope, key, digest)
}

func (o *outage) RecordWriteFailure(ctx context.Context, f store.WriteFailure) (bool, error) {
	if o.failing() {
		return false, errInjected
	}
	return o.Store.RecordWriteFailure(ctx, f)
}

func (o *outage) RecordErrors(ctx context.Context, recs []checkpointd.ErrorRecord) error {
	if o.failing() {
		return errInjected
	}
	return o.Store.RecordErrors(ctx, recs)
}

// outageHarness is a drain harness whose store can go away and come back.
func outageHarness(t *testing.T, b storetest.Backend, set func(*api.Deps)) (*harness, *outage) {
	t.Helper()
	url := storetest.URL(t, b)
	o := &outage{}
	if b == storetest.Postgres {
		o.proxy = storetest.NewProxy(t, url, "")
		url = o.proxy.URL
	}
	o.Store = storetest.OpenURL(t, url, checkpointd.SystemClock{})
	return newDrainHarness(t, o.Store, o, set), o
}

// TestDrainWriteFailureWhileStoreAway: a checkpoint write that fails
// because the store went away — at the bearer-token lookup, or past it
// where the failure recorder's own read fails too — still blocks the
// drain once the store is back: the failure is noted in memory, and the
// decision records it (checkpoint.write_failed event and error record)
// before it decides. What a caller the store cannot authenticate, or one
// outside the session's scope, sent during the outage decides nothing.
func TestDrainWriteFailureWhileStoreAway(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		for _, c := range []struct {
			name      string
			afterAuth bool
		}{{"at the token lookup", false}, {"past authentication", true}} {
			t.Run(c.name, func(t *testing.T) {
				h, o := outageHarness(t, b, nil)
				a := h.agentSession("author", "acme/widgets", "author", "fix-12")
				h.push(a, drainHeadA)
				h.do("POST", "/v1/drain", h.operator, map[string]any{"reason": "deploy"}).expect(t, 201, "")
				h.checkpoint(a, a.doc(drainHeadA)).expect(t, 201, "")
				if v := h.drainView(h.operator); v.Counts.Blocking != 0 {
					t.Fatalf("ready session blocks: %+v", v.Blocking)
				}
				if c.afterAuth {
					o.cutAfterAuth.Store(true)
				} else {
					o.goAway()
				}
				h.checkpoint(a, a.doc(drainHeadA)).expect(t, 503, "store_unavailable")
				// While the store is away the gate cannot decide.
				h.do("POST", "/v1/drain/complete", h.operator, nil).expect(t, 503, "store_unavailable")
				o.comeBack()

				r := h.do("POST", "/v1/drain/complete", h.operator, nil).expect(t, 409, "drain_blocked")
				bl := r.get("blocking").([]any)
				if len(bl) != 1 || fmt.Sprint(bl[0].(map[string]any)["reasons"]) != "[write_failed]" ||
					bl[0].(map[string]any)["write_failure"] != "store_unavailable" {
					t.Fatalf("blocking after the outage: %s", r.raw)
				}
				if n := count(h.eventKinds(a), checkpointd.EventCheckpointWriteFailed); n != 1 {
					t.Errorf("%d checkpoint.write_failed events, want 1", n)
				}
				errs := h.do("GET", "/v1/errors?source=checkpoint_write", h.operator, nil).expect(t, 200, "").get("items").([]any)
				if len(errs) != 1 || errs[0].(map[string]any)["session_id"] != a.id || errs[0].(map[string]any)["code"] != "store_unavailable" {
					t.Errorf("error records after the outage: %v", errs)
				}
				// Recorded once: the next decision does not record it again,
				// and the next successful write clears it.
				h.do("POST", "/v1/drain/complete", h.operator, nil).expect(t, 409, "drain_blocked")
				if n := count(h.eventKinds(a), checkpointd.EventCheckpointWriteFailed); n != 1 {
					t.Errorf("%d checkpoint.write_failed events after a second decision, want 1", n)
				}
				h.checkpoint(a, a.doc(drainHeadA)).expect(t, 201, "")
				h.do("POST", "/v1/drain/complete", h.operator, nil).expect(t, 200, "")
			})
		}

		t.Run("callers who may not write decide nothing", func(t *testing.T) {
			h, o := outageHarness(t, b, nil)
			a := h.agentSession("author", "acme/widgets", "author", "fix-12")
			h.push(a, drainHeadA)
			other := h.token(checkpointd.RoleAgent, []string{"other/x"})
			h.do("POST", "/v1/drain", h.operator, map[string]any{"reason": "deploy"}).expect(t, 201, "")
			h.checkpoint(a, a.doc(drainHeadA)).expect(t, 201, "")
			o.goAway()
			for _, tok := range []string{"not-a-token", other, h.reader} {
				h.do("POST", "/v1/sessions/"+a.id+"/checkpoints", tok, a.doc(drainHeadA)).expect(t, 503, "store_unavailable")
			}
			o.comeBack()
			h.do("POST", "/v1/drain/complete", h.operator, nil).expect(t, 200, "")
			if n := count(h.eventKinds(a), checkpointd.EventCheckpointWriteFailed); n != 0 {
				t.Errorf("%d checkpoint.write_failed events from callers who may not write", n)
			}
		})

		t.Run("a successful write clears what it supersedes", func(t *testing.T) {
			h, o := outageHarness(t, b, nil)
			a := h.agentSession("author", "acme/widgets", "author", "fix-12")
			h.push(a, drainHeadA)
			h.do("POST", "/v1/drain", h.operator, map[string]any{"reason": "deploy"}).expect(t, 201, "")
			o.goAway()
			h.checkpoint(a, a.doc(drainHeadA)).expect(t, 503, "store_unavailable")
			o.comeBack()
			// The agent retries: its failure is recorded first, then cleared.
			h.checkpoint(a, a.doc(drainHeadA)).expect(t, 201, "")
			h.do("POST", "/v1/drain/complete", h.operator, nil).expect(t, 200, "")
			if n := count(h.eventKinds(a), checkpointd.EventCheckpointWriteFailed); n != 1 {
				t.Errorf("%d checkpoint.write_failed events, want the one before the retry", n)
			}
		})

		t.Run("too many to keep", func(t *testing.T) {
			h, o := outageHarness(t, b, func(d *api.Deps) {
				d.Failures = replicaJournal(t, d.Store.Failures, filepath.Join(t.TempDir(), "journal"), 2)
			})
			a := h.agentSession("author", "acme/widgets", "author", "fix-12")
			h.push(a, drainHeadA)
			h.do("POST", "/v1/drain", h.operator, map[string]any{"reason": "deploy"}).expect(t, 201, "")
			h.checkpoint(a, a.doc(drainHeadA)).expect(t, 201, "")
			o.goAway()
			for i := range 3 {
				id := fmt.Sprintf("ses_%032x", i+1)
				h.do("POST", "/v1/sessions/"+id+"/checkpoints", "not-a-token", a.doc(drainHeadA)).expect(t, 503, "store_unavailable")
			}
			o.comeBack()
			r := h.do("POST", "/v1/drain/complete", h.operator, nil).expect(t, 409, "drain_blocked")
			if bl := r.get("blocking").([]any); len(bl) != 1 || bl[0].(map[string]any)["write_failure"] != "write_failures_lost" {
				t.Fatalf("after more failures than the bound: %s", r.raw)
			}
			h.checkpoint(a, a.doc(drainHeadA)).expect(t, 201, "")
			h.do("POST", "/v1/drain/complete", h.operator, nil).expect(t, 200, "")
		})
	})
}

// TestDrainUnrecordedFailureFailsClosed: while a failure noted in memory
// cannot be recorded, the status and the decision answer 503 — even with
// a store that answers them — and decide nothing.
func TestDrainUnrecordedFailureFailsClosed(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		s := storetest.Open(t, b, checkpointd.SystemClock{})
		fs := &failingRecorder{Store: s}
		h := newDrainHarness(t, s, fs, nil)
		a := h.agentSession("author", "acme/widgets", "author", "fix-12")
		h.push(a, drainHeadA)
		h.do("POST", "/v1/drain", h.operator, map[string]any{"reason": "deploy"}).expect(t, 201, "")
		h.checkpoint(a, a.doc(drainHeadA)).expect(t, 201, "")
		fs.fail.Store(true)
		h.checkpoint(a, a.doc(drainHeadA, func(d map[string]any) { d["stage"] = "no-such-stage" })).expect(t, 422, "invalid_checkpoint")
		h.do("GET", "/v1/drain", h.operator, nil).expect(t, 503, "store_unavailable")
		h.do("POST", "/v1/drain/complete", h.operator, nil).expect(t, 503, "store_unavailable")
		if d, err := s.DrainStatus(t.Context(), store.DrainQuery{Limit: 1}); err != nil || d.Drain.Decision != nil {
			t.Fatalf("a decision was taken: %+v, %v", d.Drain.Decision, err)
		}
		fs.fail.Store(false)
		h.do("POST", "/v1/drain/complete", h.operator, nil).expect(t, 409, "drain_blocked")
	})
}

// failingRecorder is the real store whose failure recording fails while
// fail is set, as a store that answers reads and refuses writes would.
type failingRecorder struct {
	*store.Store
	fail atomic.Bool
}

func (f *failingRecorder) RecordWriteFailure(ctx context.Context, w store.WriteFailure) (bool, error) {
	if f.fail.Load() {
		return false, errInjected
	}
	return f.Store.RecordWriteFailure(ctx, w)
}

// TestDrainUnrecordedFailureAcrossReplicas: a failure one replica noted
// while the store was away reaches the store once it is back without
// waiting for a decision on that replica, so another replica's decision
// sees it.
func TestDrainUnrecordedFailureAcrossReplicas(t *testing.T) {
	url := storetest.URL(t, storetest.Postgres)
	p := storetest.NewProxy(t, url, "")
	away := storetest.OpenURL(t, p.URL, checkpointd.SystemClock{})
	o := &outage{Store: away, proxy: p}
	ha := newDrainHarness(t, away, o, nil)
	other := storetest.OpenURL(t, url, checkpointd.SystemClock{})
	hb := &harness{t: t, store: other, handler: api.New(api.Deps{Store: api.StoresOf(other), Workflow: checkpointd.DefaultWorkflow(),
		DigestKey: testDigestKey, DrainHeaderTTL: -1}), operator: ha.operator, agent: ha.agent, reader: ha.reader}
	a := ha.agentSession("author", "acme/widgets", "author", "fix-12")
	ha.push(a, drainHeadA)
	hb.do("POST", "/v1/drain", hb.operator, map[string]any{"reason": "deploy"}).expect(t, 201, "")
	hb.checkpoint(a, a.doc(drainHeadA)).expect(t, 201, "")
	o.goAway()
	ha.checkpoint(a, a.doc(drainHeadA)).expect(t, 503, "store_unavailable")
	o.comeBack()
	deadline := time.Now().Add(10 * time.Second)
	for hb.drainView(hb.operator).Counts.Blocking == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the failure replica A noted never reached the store")
		}
		time.Sleep(50 * time.Millisecond)
	}
	hb.do("POST", "/v1/drain/complete", hb.operator, nil).expect(t, 409, "drain_blocked")
}
