package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/api"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
	"github.com/checkpointd/checkpointd/writefail"
)

const (
	drainHeadA = "0123456789abcdef0123456789abcdef01234567"
	drainHeadB = "89abcdef0123456789abcdef0123456789abcdef"
)

// newDrainHarness is newHarness over st with extra settings; the drain
// header is read from the store on every request, so a test sees exactly
// the store's state.
func newDrainHarness(t *testing.T, s *store.Store, st any, set func(*api.Deps)) *harness {
	t.Helper()
	h := &harness{t: t, store: s}
	d := api.Deps{Store: everyStore(st), Workflow: checkpointd.DefaultWorkflow(), DigestKey: testDigestKey,
		MaxDocumentBytes: 8 << 10, DrainHeaderTTL: -1}
	if set != nil {
		set(&d)
	}
	if d.Failures == nil {
		d.Failures = replicaJournal(t, d.Store.Failures, filepath.Join(t.TempDir(), "write-failures.journal"), 0)
	}
	h.handler = api.New(d)
	h.operator = h.token(checkpointd.RoleOperator, nil)
	h.agent = h.token(checkpointd.RoleAgent, []string{"acme/*"})
	h.reader = h.token(checkpointd.RoleReader, []string{"acme/widgets"})
	return h
}

// replicaJournal opens the failed-write journal of a replica over st at
// path, announces the replica and runs its worker until t ends, then
// leaves, as serve does.
func replicaJournal(t *testing.T, st writefail.Store, path string, max int) *writefail.Journal {
	t.Helper()
	j, err := writefail.Open(path, st, nil, max)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Announce(t.Context(), "test"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = j.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		lctx, stop := context.WithTimeout(context.Background(), 5*time.Second)
		defer stop()
		if err := j.Leave(lctx); err != nil {
			t.Logf("replica %s did not leave: %v", j.ID(), err)
		}
		j.Close()
	})
	return j
}

// unannounced is a journal kept in memory whose replica never announces
// itself, for a harness whose store goes away for good.
func unannounced(t *testing.T, st writefail.Store) *writefail.Journal {
	j, err := writefail.Open("", st, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// agentSession is a session as its agent knows it.
type agentSession struct {
	name, id, run      string
	token              int64
	repo, role, branch string
}

func (h *harness) agentSession(name, repo, role, branch string) *agentSession {
	h.t.Helper()
	r := h.do("POST", "/v1/sessions", h.agent, map[string]any{"repo": repo, "role": role, "issue": 7, "branch": branch,
		"agent": map[string]any{"runtime": "claude-code"}}).expect(h.t, 201, "")
	return &agentSession{name: name, id: r.str("session", "id"), run: r.str("run", "id"), token: r.num("run", "fencing_token"),
		repo: repo, role: role, branch: branch}
}

// doc is a complete checkpoint of the session at head.
func (a *agentSession) doc(head string, mutate ...func(map[string]any)) map[string]any {
	return checkpointDoc(a.run, a.token, append([]func(map[string]any){func(d map[string]any) {
		d["role"] = a.role
		d["target"] = map[string]any{"repo": a.repo, "issue": 7}
		d["workspace"] = map[string]any{"branch": a.branch, "head": head}
		d["next_action"] = map[string]any{"actor": a.role, "action": "continue after the restart"}
	}}, mutate...)...)
}

func (h *harness) checkpoint(a *agentSession, doc map[string]any) response {
	h.t.Helper()
	return h.do("POST", "/v1/sessions/"+a.id+"/checkpoints", h.agent, doc)
}

// push records the live head of a session's branch, as a webhook does.
func (h *harness) push(a *agentSession, head string) {
	h.t.Helper()
	if _, err := h.store.Observe(h.t.Context(), []checkpointd.Observation{{Repo: a.repo, Branch: a.branch, Head: head,
		Authoritative: true, Source: "test"}}); err != nil {
		h.t.Fatalf("Observe: %v", err)
	}
}

// drainView is GET /v1/drain decoded.
type drainView struct {
	Drain    *checkpointd.Drain         `json:"drain"`
	Draining bool                       `json:"draining"`
	Counts   *checkpointd.DrainCounts   `json:"counts"`
	Blocking []checkpointd.DrainBlocker `json:"blocking"`
}

func (h *harness) drainView(token string) drainView {
	h.t.Helper()
	r := h.do("GET", "/v1/drain?limit=500", token, nil).expect(h.t, 200, "")
	var v drainView
	if err := json.Unmarshal(r.raw, &v); err != nil {
		h.t.Fatal(err)
	}
	return v
}

// blockingBy names the blocking sessions with their reasons.
func blockingBy(bs []checkpointd.DrainBlocker, sessions ...*agentSession) map[string][]checkpointd.BlockReason {
	name := map[string]string{}
	for _, s := range sessions {
		name[s.id] = s.name
	}
	out := map[string][]checkpointd.BlockReason{}
	for _, b := range bs {
		n := name[b.SessionID]
		if n == "" {
			n = b.SessionID
		}
		out[n] = b.Reasons
	}
	return out
}

// eventKinds lists a session's event kinds.
func (h *harness) eventKinds(a *agentSession) []string {
	h.t.Helper()
	r := h.do("GET", "/v1/sessions/"+a.id+"/events?limit=500", h.operator, nil).expect(h.t, 200, "")
	var out []string
	for _, e := range r.get("items").([]any) {
		out = append(out, e.(map[string]any)["kind"].(string))
	}
	return out
}

func count(xs []string, x string) int {
	n := 0
	for _, v := range xs {
		if v == x {
			n++
		}
	}
	return n
}

// fakeVerifier stands in for reconcile: it records what the gate asked and
// runs verify, if set.
type fakeVerifier struct {
	mu     sync.Mutex
	asked  [][]string
	verify func(ids []string) error
}

func (f *fakeVerifier) VerifySessions(_ context.Context, ids []string) error {
	f.mu.Lock()
	f.asked = append(f.asked, slices.Clone(ids))
	v := f.verify
	f.mu.Unlock()
	if v == nil {
		return nil
	}
	return v(ids)
}

func (f *fakeVerifier) lastAsked() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.asked) == 0 {
		return nil
	}
	return f.asked[len(f.asked)-1]
}

// TestDrainScenario drives a drain over HTTP from start to completion with
// an author and a reviewer on each of two repos: new sessions and runs are
// refused while checkpoint writes and lease renewals continue; the blocking
// list shrinks as agents write fresh complete checkpoints; incomplete,
// stale, lease-lost and unverified sessions block with their reason (the
// unverified one until reconcile, asked by the gate, verifies it); ending a
// session unblocks it; every decision lands in the logs of the sessions it
// concerns; the completed drain keeps refusing new sessions until lifted.
func TestDrainScenario(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		s := storetest.Open(t, b, checkpointd.SystemClock{})
		ver := &fakeVerifier{verify: func([]string) error { return errors.New("forge unreachable") }}
		var mu sync.Mutex
		var outcomes []checkpointd.DrainOutcome
		h := newDrainHarness(t, s, s, func(d *api.Deps) {
			d.Verifier = ver
			d.OnDrainDecision = func(o checkpointd.DrainOutcome) { mu.Lock(); outcomes = append(outcomes, o); mu.Unlock() }
		})
		aw := h.agentSession("author@widgets", "acme/widgets", "author", "fix-12")
		rw := h.agentSession("reviewer@widgets", "acme/widgets", "reviewer", "review-12")
		ag := h.agentSession("author@gadgets", "acme/gadgets", "author", "fix-7")
		rg := h.agentSession("reviewer@gadgets", "acme/gadgets", "reviewer", "review-7")
		all := []*agentSession{aw, rw, ag, rg}
		for _, a := range []*agentSession{aw, rw, rg} {
			h.push(a, drainHeadA)
		}
		lease := h.do("POST", "/v1/leases", h.agent, map[string]any{"resource": map[string]any{"kind": "branch", "repo": rg.repo, "branch": rg.branch},
			"session_id": rg.id, "run_id": rg.run, "ttl_seconds": 600}).expect(t, 201, "")
		leaseID, leaseToken := lease.str("lease", "id"), lease.num("lease", "fencing_token")
		for _, a := range all {
			h.checkpoint(a, a.doc(drainHeadA)).expect(t, 201, "")
		}
		if r := h.do("GET", "/v1/sessions/"+aw.id, h.agent, nil); r.header.Get(api.DrainHeader) != "" {
			t.Fatalf("%s header before any drain", api.DrainHeader)
		}

		// The operator starts the drain: everything written before counts
		// for nothing.
		r := h.do("POST", "/v1/drain", h.operator, map[string]any{"reason": "deploy v2"}).expect(t, 201, "")
		if r.str("drain", "state") != "running" || r.header.Get(api.DrainHeader) != "draining" {
			t.Fatalf("start: %s header %q", r.raw, r.header.Get(api.DrainHeader))
		}
		v := h.drainView(h.operator)
		if !v.Draining || *v.Counts != (checkpointd.DrainCounts{Active: 4, Ready: 0, Blocking: 4}) {
			t.Fatalf("right after the start: %+v", v.Counts)
		}
		for _, bl := range v.Blocking {
			want := []checkpointd.BlockReason{checkpointd.BlockNoCheckpoint}
			if bl.SessionID == ag.id {
				want = append(want, checkpointd.BlockUnverified)
			}
			if !slices.Equal(bl.Reasons, want) {
				t.Errorf("%s blocks with %v, want %v", bl.SessionID, bl.Reasons, want)
			}
		}
		// New sessions and runs are refused; the refusal carries the header.
		r = h.do("POST", "/v1/sessions", h.agent, sessionBody).expect(t, 503, "draining")
		if r.header.Get(api.DrainHeader) != "draining" {
			t.Error("a refusal without the drain header")
		}
		h.do("POST", "/v1/sessions/"+aw.id+"/runs", h.agent, map[string]any{"takeover": true, "reason": "crash"}).expect(t, 503, "draining")
		// Lease renewals continue.
		h.do("POST", "/v1/leases/"+leaseID+"/renew", h.agent, map[string]any{"run_id": rg.run}).expect(t, 200, "")

		// Agents write; the list shrinks and names what is wrong.
		h.checkpoint(aw, aw.doc(drainHeadA)).expect(t, 201, "")
		h.checkpoint(rw, rw.doc(drainHeadA, func(d map[string]any) { delete(d, "next_action") })).expect(t, 201, "")
		h.checkpoint(ag, ag.doc(drainHeadA)).expect(t, 201, "")
		h.checkpoint(rg, rg.doc(drainHeadA, func(d map[string]any) {
			d["leases"] = []any{map[string]any{"lease_id": leaseID, "fencing_token": leaseToken}}
		})).expect(t, 201, "")
		h.do("DELETE", "/v1/leases/"+leaseID+"?run_id="+rg.run, h.agent, nil).expect(t, 204, "")
		v = h.drainView(h.operator)
		want := map[string][]checkpointd.BlockReason{
			rw.name: {checkpointd.BlockIncomplete},
			ag.name: {checkpointd.BlockUnverified},
			rg.name: {checkpointd.BlockLeaseLost},
		}
		if diff := cmp.Diff(want, blockingBy(v.Blocking, all...)); diff != "" {
			t.Fatalf("blocking (-want +got):\n%s", diff)
		}
		if *v.Counts != (checkpointd.DrainCounts{Active: 4, Ready: 1, Blocking: 3}) {
			t.Errorf("counts %+v", v.Counts)
		}
		for _, bl := range v.Blocking {
			if bl.SessionID == rw.id && !slices.Equal(bl.Missing, []string{"next_action"}) {
				t.Errorf("incomplete without its missing rule: %+v", bl)
			}
		}

		// Completing now is refused with the list; reconcile was asked about
		// the session blocked only by unverified, but the forge is down.
		r = h.do("POST", "/v1/drain/complete", h.operator, nil).expect(t, 409, "drain_blocked")
		// The answer carries its length: the operator has all of it while
		// the gate goes on to record the decision in the sessions' logs.
		if cl := r.header.Get("Content-Length"); cl != strconv.Itoa(len(r.raw)) {
			t.Errorf("blocked answer: Content-Length %q for %d bytes", cl, len(r.raw))
		}
		var blocked struct {
			Counts   checkpointd.DrainCounts    `json:"counts"`
			Blocking []checkpointd.DrainBlocker `json:"blocking"`
		}
		if err := json.Unmarshal(r.raw, &blocked); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, blockingBy(blocked.Blocking, all...)); diff != "" || blocked.Counts.Blocking != 3 {
			t.Errorf("409 blocking list (-want +got):\n%s counts %+v", diff, blocked.Counts)
		}
		if got := ver.lastAsked(); !slices.Equal(got, []string{ag.id}) {
			t.Errorf("the gate asked reconcile about %v, want only %s", got, ag.id)
		}
		// Every active session's log records the decision, blocking or not
		// (the gate writes the notes after its answer, in the background).
		for _, a := range all {
			n := 0
			for deadline := time.Now().Add(10 * time.Second); n == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				n = count(h.eventKinds(a), checkpointd.EventDrainBlocked)
			}
			if n != 1 {
				t.Errorf("%s: %d drain.blocked events, want 1", a.name, n)
			}
		}

		// The author on widgets is overtaken by a push: stale until it
		// checkpoints the new head.
		h.push(aw, drainHeadB)
		v = h.drainView(h.operator)
		if got := blockingBy(v.Blocking, all...)[aw.name]; !slices.Equal(got, []checkpointd.BlockReason{checkpointd.BlockStale}) {
			t.Errorf("after the push the author blocks with %v, want stale", got)
		}
		h.checkpoint(aw, aw.doc(drainHeadB)).expect(t, 201, "")
		h.checkpoint(rw, rw.doc(drainHeadA)).expect(t, 201, "")
		// The reviewer on gadgets ends its session: ended sessions never block.
		h.do("POST", "/v1/sessions/"+rg.id+"/end", h.agent, map[string]any{"run_id": rg.run, "outcome": "completed"}).expect(t, 200, "")
		v = h.drainView(h.operator)
		if diff := cmp.Diff(map[string][]checkpointd.BlockReason{ag.name: {checkpointd.BlockUnverified}}, blockingBy(v.Blocking, all...)); diff != "" {
			t.Fatalf("blocking (-want +got):\n%s", diff)
		}
		if *v.Counts != (checkpointd.DrainCounts{Active: 3, Ready: 2, Blocking: 1}) {
			t.Errorf("counts %+v", v.Counts)
		}

		// The forge is back: the gate has reconcile verify the last one and
		// completes.
		ver.mu.Lock()
		ver.verify = func(ids []string) error { h.push(ag, drainHeadA); return nil }
		ver.mu.Unlock()
		r = h.do("POST", "/v1/drain/complete", h.operator, nil).expect(t, 200, "")
		if r.str("drain", "state") != "completed" || r.str("drain", "decision", "outcome") != "completed" || r.num("drain", "decision", "counts", "ready") != 3 {
			t.Fatalf("completion: %s", r.raw)
		}
		// The logs are told after the answer, in the background.
		for _, a := range all {
			n := count(h.eventKinds(a), checkpointd.EventDrainCompleted)
			for deadline := time.Now().Add(10 * time.Second); a != rg && n == 0 && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
				n = count(h.eventKinds(a), checkpointd.EventDrainCompleted)
			}
			if (a == rg) != (n == 0) || n > 1 {
				t.Errorf("%s: %d drain.completed events", a.name, n)
			}
		}
		mu.Lock()
		if !slices.Equal(outcomes, []checkpointd.DrainOutcome{checkpointd.DrainOutcomeBlocked, checkpointd.DrainOutcomeCompleted}) {
			t.Errorf("decisions observed: %v", outcomes)
		}
		mu.Unlock()

		// Completed: still refusing until lifted, so nothing starts between
		// the completion and the restart.
		r = h.do("POST", "/v1/sessions", h.agent, sessionBody).expect(t, 503, "draining")
		if v := h.drainView(h.reader); !v.Draining || v.Drain.State != checkpointd.DrainCompleted {
			t.Errorf("after completion: %+v", v.Drain)
		}
		h.do("POST", "/v1/drain/complete", h.operator, nil).expect(t, 200, "")
		r = h.do("POST", "/v1/drain/cancel", h.operator, nil).expect(t, 200, "")
		if r.str("drain", "state") != "completed" || r.get("drain", "lifted_at") == nil || r.header.Get(api.DrainHeader) != "" {
			t.Errorf("lift: %s header %q", r.raw, r.header.Get(api.DrainHeader))
		}
		r = h.do("POST", "/v1/sessions", h.agent, sessionBody).expect(t, 201, "")
		if r.header.Get(api.DrainHeader) != "" {
			t.Error("drain header after the lift")
		}
	})
}

// TestDrainWriteFailure: a checkpoint write by the current run that fails
// after the drain started (invalid document, or a store error) blocks the
// completion with write_failed until a later write succeeds; a write
// refused because its run was superseded is not the session's failure.
func TestDrainWriteFailure(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		s := storetest.Open(t, b, checkpointd.SystemClock{})
		h := newDrainHarness(t, s, s, nil)
		a := h.agentSession("author", "acme/widgets", "author", "fix-12")
		old := a.run
		r := h.do("POST", "/v1/sessions/"+a.id+"/runs", h.agent, map[string]any{"takeover": true, "reason": "restart"}).expect(t, 201, "")
		a.run, a.token = r.str("run", "id"), r.num("run", "fencing_token")
		h.push(a, drainHeadA)

		h.do("POST", "/v1/drain", h.operator, map[string]any{"reason": "deploy"}).expect(t, 201, "")
		h.checkpoint(a, a.doc(drainHeadA)).expect(t, 201, "")
		if v := h.drainView(h.operator); v.Counts.Blocking != 0 {
			t.Fatalf("ready session blocks: %+v", v.Blocking)
		}
		// The superseded run's write is refused, and is not recorded.
		stale := checkpointDoc(old, 1, func(d map[string]any) { d["target"] = map[string]any{"repo": a.repo, "issue": 7} })
		h.checkpoint(a, stale).expect(t, 409, "run_superseded")
		if v := h.drainView(h.operator); v.Counts.Blocking != 0 {
			t.Fatalf("a superseded run's refused write blocks: %+v", v.Blocking)
		}

		// The current run's next write is invalid: it blocks.
		h.checkpoint(a, a.doc(drainHeadA, func(d map[string]any) { d["stage"] = "no-such-stage" })).expect(t, 422, "invalid_checkpoint")
		v := h.drainView(h.operator)
		if len(v.Blocking) != 1 || !slices.Equal(v.Blocking[0].Reasons, []checkpointd.BlockReason{checkpointd.BlockWriteFailed}) ||
			v.Blocking[0].WriteFailure != "invalid_checkpoint" {
			t.Fatalf("after a failed write: %+v", v.Blocking)
		}
		r = h.do("POST", "/v1/drain/complete", h.operator, nil).expect(t, 409, "drain_blocked")
		if got := r.get("blocking").([]any)[0].(map[string]any)["reasons"]; fmt.Sprint(got) != "[write_failed]" {
			t.Errorf("409 reasons %v", got)
		}
		if n := count(h.eventKinds(a), checkpointd.EventCheckpointWriteFailed); n != 1 {
			t.Errorf("%d checkpoint.write_failed events, want 1", n)
		}

		// A later successful write clears it.
		h.checkpoint(a, a.doc(drainHeadA)).expect(t, 201, "")
		if v := h.drainView(h.operator); v.Counts.Blocking != 0 {
			t.Fatalf("a successful write did not clear the failure: %+v", v.Blocking)
		}

		// The store fails the write itself: recorded (here the failure
		// record reaches the store the write could not).
		hf := newDrainHarness(t, s, failingStore{Store: s, fail: map[string]bool{"WriteCheckpoint": true}}, nil)
		hf.checkpoint(a, a.doc(drainHeadA)).expect(t, 503, "store_unavailable")
		v = h.drainView(h.operator)
		if len(v.Blocking) != 1 || v.Blocking[0].WriteFailure != "store_unavailable" {
			t.Fatalf("after a store failure: %+v", v.Blocking)
		}
		h.do("POST", "/v1/drain/complete", h.operator, nil).expect(t, 409, "drain_blocked")
		h.checkpoint(a, a.doc(drainHeadA)).expect(t, 201, "")
		h.do("POST", "/v1/drain/complete", h.operator, nil).expect(t, 200, "")
	})
}

// failingStore is the real store with some methods failing as an
// unreachable database would.
type failingStore struct {
	*store.Store
	fail map[string]bool
}

var errInjected = fmt.Errorf("%w: injected: connection refused", checkpointd.ErrStoreUnavailable)

func (f failingStore) WriteCheckpoint(ctx context.Context, w store.CheckpointWrite) (*checkpointd.Checkpoint, error) {
	if f.fail["WriteCheckpoint"] {
		return nil, errInjected
	}
	return f.Store.WriteCheckpoint(ctx, w)
}

func (f failingStore) DrainStatus(ctx context.Context, q store.DrainQuery) (*store.DrainStatus, error) {
	if f.fail["DrainStatus"] {
		return nil, errInjected
	}
	return f.Store.DrainStatus(ctx, q)
}

func (f failingStore) DrainUnverified(ctx context.Context, limit int) ([]string, error) {
	if f.fail["DrainUnverified"] {
		return nil, errInjected
	}
	return f.Store.DrainUnverified(ctx, limit)
}

func (f failingStore) CompleteDrain(ctx context.Context, c store.DrainCompletion) (*checkpointd.Drain, error) {
	if f.fail["CompleteDrain"] {
		return nil, errInjected
	}
	return f.Store.CompleteDrain(ctx, c)
}

// TestDrainFailsClosed: when anything the decision needs cannot be read —
// a failing store method, a closed store, on PostgreSQL a server that
// refuses connections — complete answers 503 and the drain stays running
// with no decision recorded, though nothing blocks it.
func TestDrainFailsClosed(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		url := storetest.URL(t, b)
		s := storetest.OpenURL(t, url, checkpointd.SystemClock{})
		h := newDrainHarness(t, s, s, nil)
		a := h.agentSession("author", "acme/widgets", "author", "fix-12")
		h.push(a, drainHeadA)
		h.do("POST", "/v1/drain", h.operator, map[string]any{"reason": "deploy"}).expect(t, 201, "")
		h.checkpoint(a, a.doc(drainHeadA)).expect(t, 201, "")
		notDecided := func(t *testing.T) {
			t.Helper()
			st, err := s.DrainStatus(t.Context(), store.DrainQuery{Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			if st.Drain.State != checkpointd.DrainRunning || st.Drain.Decision != nil || st.Counts.Blocking != 0 {
				t.Fatalf("after a failed decision: drain %+v counts %+v", st.Drain, st.Counts)
			}
		}

		for _, method := range []string{"DrainUnverified", "CompleteDrain"} {
			t.Run("failing "+method, func(t *testing.T) {
				hf := newDrainHarness(t, s, failingStore{Store: s, fail: map[string]bool{method: true}},
					func(d *api.Deps) { d.Verifier = &fakeVerifier{} })
				r := hf.do("POST", "/v1/drain/complete", hf.operator, nil).expect(t, 503, "store_unavailable")
				if r.str("detail") != "the store cannot be reached; nothing was changed" {
					t.Errorf("503 detail %q", r.str("detail"))
				}
				notDecided(t)
			})
		}
		t.Run("failing status", func(t *testing.T) {
			hf := newDrainHarness(t, s, failingStore{Store: s, fail: map[string]bool{"DrainStatus": true}}, nil)
			hf.do("GET", "/v1/drain", hf.operator, nil).expect(t, 503, "store_unavailable")
		})
		t.Run("closed store", func(t *testing.T) {
			s2 := storetest.OpenURL(t, url, checkpointd.SystemClock{})
			h2 := newDrainHarness(t, s2, s2, func(d *api.Deps) { d.Failures = unannounced(t, s2) })
			s2.Close()
			h2.do("POST", "/v1/drain/complete", h2.operator, nil).expect(t, 503, "store_unavailable")
			h2.do("GET", "/v1/drain", h2.operator, nil).expect(t, 503, "store_unavailable")
			notDecided(t)
		})
		if b == storetest.Postgres {
			t.Run("server refuses", func(t *testing.T) {
				p := storetest.NewProxy(t, url, "")
				sp := storetest.OpenURL(t, p.URL, checkpointd.SystemClock{})
				hp := newDrainHarness(t, sp, sp, func(d *api.Deps) { d.Failures = unannounced(t, sp) })
				hp.do("GET", "/v1/drain", hp.operator, nil).expect(t, 200, "")
				p.Cut()
				hp.do("POST", "/v1/drain/complete", hp.operator, nil).expect(t, 503, "store_unavailable")
				notDecided(t)
			})
		}
		// With the store back, the same request completes.
		h.do("POST", "/v1/drain/complete", h.operator, nil).expect(t, 200, "")
	})
}

// TestDrainHeader: while a drain gates, every response carries
// Checkpointd-Drain: draining — successes, refusals, 401s, 404s, probes —
// and none does before or after; a drain started on another replica shows
// within the header cache's TTL.
func TestDrainHeader(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		s := storetest.Open(t, b, checkpointd.SystemClock{})
		h := newDrainHarness(t, s, s, func(d *api.Deps) { d.DrainHeaderTTL = 50 * time.Millisecond })
		a := h.agentSession("author", "acme/widgets", "author", "fix-12")
		requests := []struct {
			method, path, token string
			body                any
		}{
			{"GET", "/healthz", "", nil},
			{"GET", "/v1/sessions/" + a.id, "", nil},
			{"GET", "/v1/sessions/" + a.id, h.agent, nil},
			{"GET", "/v1/nowhere", h.agent, nil},
			{"POST", "/v1/sessions/" + a.id + "/checkpoints", h.agent, a.doc(drainHeadA)},
			{"GET", "/v1/drain", h.reader, nil},
		}
		check := func(want string) {
			t.Helper()
			for _, q := range requests {
				if got := h.do(q.method, q.path, q.token, q.body).header.Get(api.DrainHeader); got != want {
					t.Errorf("%s %s: %s %q, want %q", q.method, q.path, api.DrainHeader, got, want)
				}
			}
		}
		check("")
		// Another replica starts the drain: this one shows it within the TTL.
		if _, _, err := s.StartDrain(t.Context(), "deploy", "tok_other"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(60 * time.Millisecond)
		check("draining")
		h.do("POST", "/v1/drain/cancel", h.operator, nil).expect(t, 200, "")
		check("")
	})
}

// TestDrainRequests: what the drain endpoints refuse, and how a scoped
// reader sees the status.
func TestDrainRequests(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		s := storetest.Open(t, b, checkpointd.SystemClock{})
		h := newDrainHarness(t, s, s, nil)
		h.do("POST", "/v1/drain/complete", h.operator, nil).expect(t, 404, "not_found")
		h.do("POST", "/v1/drain/cancel", h.operator, nil).expect(t, 404, "not_found")
		v := h.drainView(h.reader)
		if v.Drain != nil || v.Draining || v.Counts != nil || v.Blocking == nil {
			t.Errorf("status before any drain: %+v", v)
		}
		h.do("POST", "/v1/drain", h.operator, map[string]any{}).expect(t, 422, "invalid_request")
		h.do("POST", "/v1/drain", h.operator, map[string]any{"reason": "  "}).expect(t, 422, "invalid_request")
		h.do("POST", "/v1/drain", h.operator, map[string]any{"reason": "x", "force": true}).expect(t, 422, "invalid_request")
		h.do("POST", "/v1/drain", h.operator, "{").expect(t, 400, "invalid_json")

		widgets := h.agentSession("widgets", "acme/widgets", "author", "w")
		gadgets := h.agentSession("gadgets", "acme/gadgets", "author", "g")
		r := h.do("POST", "/v1/drain", h.operator, map[string]any{"reason": "deploy with token ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}).expect(t, 201, "")
		if r.header.Get("Location") != "/v1/drain" || r.str("drain", "reason") != "deploy with token [REDACTED:github_token]" {
			t.Errorf("start: Location %q reason %q", r.header.Get("Location"), r.str("drain", "reason"))
		}
		id := r.str("drain", "id")
		r = h.do("POST", "/v1/drain", h.operator, map[string]any{"reason": "again"}).expect(t, 409, "drain_running")
		if r.str("drain", "id") != id {
			t.Errorf("409 names drain %q, want the running %q", r.str("drain", "id"), id)
		}

		// A reader scoped to acme/widgets sees every count, only its sessions.
		v = h.drainView(h.reader)
		if v.Counts.Blocking != 2 || len(v.Blocking) != 1 || v.Blocking[0].SessionID != widgets.id {
			t.Errorf("scoped reader: counts %+v list %+v", v.Counts, v.Blocking)
		}
		// Pages by session id.
		var ids []string
		for page := "/v1/drain?limit=1"; ; {
			r := h.do("GET", page, h.operator, nil).expect(t, 200, "")
			for _, it := range r.get("blocking").([]any) {
				ids = append(ids, it.(map[string]any)["session_id"].(string))
			}
			next, _ := r.get("next_cursor").(string)
			if next == "" {
				break
			}
			page = "/v1/drain?limit=1&cursor=" + next
		}
		want := []string{widgets.id, gadgets.id}
		sort.Strings(want)
		if !slices.Equal(ids, want) {
			t.Errorf("paged %v, want %v", ids, want)
		}
		h.do("GET", "/v1/drain?cursor=nonsense", h.operator, nil).expect(t, 422, "invalid_request")
	})
}

// TestCompleteWithoutDrainAsksNoForge: completing when no drain is running
// answers 404 at once — no reconcile pass for sessions that would block a
// drain nobody started — and so does it after the drain was cancelled.
func TestCompleteWithoutDrainAsksNoForge(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		s := storetest.Open(t, b, checkpointd.SystemClock{})
		ver := &fakeVerifier{}
		h := newDrainHarness(t, s, s, func(d *api.Deps) { d.Verifier = ver })
		a := h.agentSession("author@widgets", "acme/widgets", "author", "fix-12")
		// Complete and unverified (nothing observed): what the gate would
		// hand to reconcile.
		h.checkpoint(a, a.doc(drainHeadA)).expect(t, 201, "")
		h.do("POST", "/v1/drain/complete", h.operator, nil).expect(t, 404, "not_found")
		if n := len(ver.asked); n != 0 {
			t.Fatalf("no drain: the gate asked reconcile %d times (%v), want none", n, ver.asked)
		}
		h.do("POST", "/v1/drain", h.operator, map[string]any{"reason": "deploy"}).expect(t, 201, "")
		h.do("POST", "/v1/drain/cancel", h.operator, nil).expect(t, 200, "")
		h.do("POST", "/v1/drain/complete", h.operator, nil).expect(t, 404, "not_found")
		if n := len(ver.asked); n != 0 {
			t.Fatalf("cancelled drain: the gate asked reconcile %d times, want none", n)
		}
		// A running drain still asks before deciding.
		h.do("POST", "/v1/drain", h.operator, map[string]any{"reason": "deploy"}).expect(t, 201, "")
		h.checkpoint(a, a.doc(drainHeadA)).expect(t, 201, "")
		h.do("POST", "/v1/drain/complete", h.operator, nil).expect(t, 409, "drain_blocked")
		if got := ver.lastAsked(); len(got) != 1 || got[0] != a.id {
			t.Fatalf("running drain: asked %v, want [%s]", got, a.id)
		}
	})
}
