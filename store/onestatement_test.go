package store_test

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// oneStatementWorld is one database with two replicas (stores) on it, for
// the one-statement write and the transaction to be run side by side.
type oneStatementWorld struct {
	url     string
	s, r    *store.Store
	clock   *checkpointd.ManualClock
	raw     *sql.DB
	ids     []string // ids as they appear, normalised to their index
	oneStmt bool
}

func newOneStatementWorld(t *testing.T, oneStmt bool) *oneStatementWorld {
	url := storetest.URL(t, storetest.Postgres)
	clock := checkpointd.NewManualClock(t0)
	w := &oneStatementWorld{url: url, clock: clock, oneStmt: oneStmt,
		s: storetest.OpenURL(t, url, clock), r: storetest.OpenURL(t, url, clock), raw: openRaw(t, storetest.Postgres, url)}
	store.SetOneStatementWrite(w.s, oneStmt)
	store.SetOneStatementWrite(w.r, oneStmt)
	return w
}

func (w *oneStatementWorld) id(id string) { w.ids = append(w.ids, id) }

// normal replaces the world's random ids by their order of appearance.
func (w *oneStatementWorld) normal(s string) string {
	for i, id := range w.ids {
		s = strings.ReplaceAll(s, id, fmt.Sprintf("<id%d>", i))
	}
	return s
}

// dump is every row a checkpoint write touches, and what reads make of
// them: the session row, the checkpoints (sealed parts opened, digests
// checked by the read), the events. Transaction ids, the seal's random
// nonces and the document digests (of documents that hold the random run
// ids; GetCheckpoint checks each) are left out.
func (w *oneStatementWorld) dump(t *testing.T, sessionID string) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{
		`SELECT to_jsonb(x)::text FROM sessions x ORDER BY created_at`,
		`SELECT (to_jsonb(x) - 'sealed' - 'document_digest')::text FROM checkpoints x ORDER BY seq`,
		`SELECT (to_jsonb(x) - 'xid')::text FROM events x ORDER BY seq`,
		`SELECT to_jsonb(x)::text FROM leases x ORDER BY acquired_at`,
		`SELECT to_jsonb(x)::text FROM live_refs x ORDER BY ref`,
		`SELECT (to_jsonb(x) - 'response' - 'claim' - 'owner')::text FROM idempotency x ORDER BY idem_key`,
	} {
		rows, err := w.raw.QueryContext(t.Context(), q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			b.WriteString(line + "\n")
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
	}
	cps, err := w.s.ListCheckpoints(t.Context(), sessionID, 0, 500)
	if err != nil {
		t.Fatalf("ListCheckpoints: %v", err)
	}
	for _, c := range cps {
		cp, err := w.s.GetCheckpoint(t.Context(), sessionID, c.Seq)
		if err != nil {
			t.Fatalf("GetCheckpoint %d: %v", c.Seq, err)
		}
		j, _ := json.Marshal(cp)
		b.WriteString(string(j) + "\n")
	}
	return w.normal(b.String())
}

// outcome is what a write answered, without what differs by nature.
func outcome(cp *checkpointd.Checkpoint, err error) string {
	if err != nil {
		for _, e := range []error{checkpointd.ErrForbidden, checkpointd.ErrRunSuperseded, checkpointd.ErrSessionEnded, checkpointd.ErrIdempotencyInFlight,
			checkpointd.ErrInvalidCheckpoint, checkpointd.ErrNotFound, checkpointd.ErrStoreUnavailable} {
			if errors.Is(err, e) {
				return "error: " + e.Error()
			}
		}
		return "error: " + err.Error()
	}
	parent := "-"
	if cp.ParentSeq != nil {
		parent = fmt.Sprint(*cp.ParentSeq)
	}
	return fmt.Sprintf("seq %d parent %s complete %v missing %v validity %s at %s", cp.Seq, parent, cp.Complete, cp.Missing,
		cp.Validity, cp.CreatedAt.Format(time.RFC3339Nano))
}

// oneStatementStep is one thing the scenario does, and whether the write
// it makes (if any) is one the one statement takes.
type oneStatementStep struct {
	name string
	// oneStatement: the write is the common case.
	oneStatement bool
	do           func(t *testing.T, w *oneStatementWorld, st *scenarioState) string
}

type scenarioState struct {
	sess     *checkpointd.Session
	run, old *checkpointd.Run
	lease    *checkpointd.Lease
	short    *checkpointd.Lease
	head     string
	branch   string
}

func (st *scenarioState) doc(stage string) *checkpointd.Document {
	d := doc(st.run, stage)
	d.Workspace.Head, d.Workspace.Branch = st.head, st.branch
	return d
}

func writeStep(name string, oneStmt bool, edit func(st *scenarioState, d *checkpointd.Document)) oneStatementStep {
	return oneStatementStep{name: name, oneStatement: oneStmt, do: func(t *testing.T, w *oneStatementWorld, st *scenarioState) string {
		d := st.doc("implementing")
		if edit != nil {
			edit(st, d)
		}
		return outcome(write(t.Context(), w.s, st.sess.ID, d))
	}}
}

func deliver(t *testing.T, w *oneStatementWorld, id string, obs checkpointd.Observation) string {
	t.Helper()
	obs.Repo, obs.Source = "Owner/Name", "webhook:"+id
	if _, _, err := w.s.ApplyDelivery(t.Context(), store.DeliveryRecord{ID: id, Event: "push", Forge: "gitea", Repo: "owner/name"},
		[]checkpointd.Observation{obs}); err != nil {
		t.Fatalf("ApplyDelivery %s: %v", id, err)
	}
	if err := w.s.Settle(t.Context()); err != nil {
		t.Fatalf("Settle: %v", err)
	}
	return "delivered " + id
}

// idempotentWrite writes under a claimed key and returns the answer and
// the response a retry replays; takenOver hands the claim to another
// request first.
func idempotentWrite(t *testing.T, w *oneStatementWorld, st *scenarioState, key string, takenOver bool) string {
	t.Helper()
	ctx := t.Context()
	scope := "checkpoints:" + st.sess.ID
	claim, replay, err := w.s.ClaimIdempotency(ctx, scope, key, "sha256:request")
	if err != nil || replay != nil {
		t.Fatalf("ClaimIdempotency: %v, %v", replay, err)
	}
	if takenOver {
		if _, err := w.raw.ExecContext(ctx, `UPDATE idempotency SET claim = 'another' WHERE idem_key = $1`, key); err != nil {
			t.Fatal(err)
		}
	}
	answer := outcome(w.s.WriteCheckpoint(ctx, store.CheckpointWrite{SessionID: st.sess.ID, Doc: st.doc("idempotent"),
		Digest: "hmac-sha256:v1:00", Idempotency: &store.Idempotency{Scope: scope, Key: key, Claim: claim, Status: 201,
			Render: func(res any) ([]byte, error) { return json.Marshal(res) }}}))
	if takenOver {
		return answer
	}
	_, replay, err = w.s.ClaimIdempotency(ctx, scope, key, "sha256:request")
	if err != nil || replay == nil {
		t.Fatalf("the retry of %s: %v, %v; want a replay", key, replay, err)
	}
	return fmt.Sprintf("%s; replays %d %s", answer, replay.Status, replay.Body)
}

const headC = "cccccccccccccccccccccccccccccccccccccccc"

var oneStatementScenario = []oneStatementStep{
	writeStep("first write (binds the PR)", false, nil),
	writeStep("second write", true, nil),
	writeStep("incomplete (no next action)", true, func(_ *scenarioState, d *checkpointd.Document) { d.NextAction = nil }),
	writeStep("complete again, another stage and blocker", true, func(_ *scenarioState, d *checkpointd.Document) {
		d.Stage = "waiting_review"
		d.Blocker = &checkpointd.Blocker{Kind: "waiting_review", WaitingOn: "reviewer", Summary: "review requested"}
		d.NextAction.Actor = "reviewer"
		d.Workspace.Worktree = "/srv/w"
	}),
	{name: "acquire a lease", do: func(t *testing.T, w *oneStatementWorld, st *scenarioState) string {
		l, err := w.s.AcquireLease(t.Context(), store.NewLease{Resource: checkpointd.Resource{Kind: checkpointd.ResourceIssue,
			Repo: "owner/name", Number: 12}, SessionID: st.sess.ID, RunID: st.run.ID, TTL: time.Hour})
		if err != nil {
			t.Fatalf("AcquireLease: %v", err)
		}
		st.lease = l
		w.id(l.ID)
		return "lease acquired"
	}},
	writeStep("names the held lease", true, func(st *scenarioState, d *checkpointd.Document) {
		d.Leases = []checkpointd.LeaseRef{{LeaseID: st.lease.ID, FencingToken: st.lease.FencingToken}}
	}),
	writeStep("names the held lease twice", true, func(st *scenarioState, d *checkpointd.Document) {
		l := checkpointd.LeaseRef{LeaseID: st.lease.ID, FencingToken: st.lease.FencingToken}
		d.Leases = []checkpointd.LeaseRef{l, l}
	}),
	{name: "a short lease runs out", do: func(t *testing.T, w *oneStatementWorld, st *scenarioState) string {
		l, err := w.s.AcquireLease(t.Context(), store.NewLease{Resource: checkpointd.Resource{Kind: checkpointd.ResourceIssue,
			Repo: "owner/name", Number: 13}, SessionID: st.sess.ID, RunID: st.run.ID, TTL: time.Minute})
		if err != nil {
			t.Fatalf("AcquireLease: %v", err)
		}
		w.id(l.ID)
		st.short = l
		w.clock.Advance(2 * time.Minute)
		return "lease acquired, clock past its expiry"
	}},
	writeStep("names the run-out lease", false, func(st *scenarioState, d *checkpointd.Document) {
		d.Leases = []checkpointd.LeaseRef{{LeaseID: st.short.ID, FencingToken: st.short.FencingToken},
			{LeaseID: st.lease.ID, FencingToken: st.lease.FencingToken}}
	}),
	writeStep("names the held lease after that", false, func(st *scenarioState, d *checkpointd.Document) {
		d.Leases = []checkpointd.LeaseRef{{LeaseID: st.lease.ID, FencingToken: st.lease.FencingToken}}
	}),
	writeStep("names the lease at a wrong token", false, func(st *scenarioState, d *checkpointd.Document) {
		d.Leases = []checkpointd.LeaseRef{{LeaseID: st.lease.ID, FencingToken: st.lease.FencingToken + 1}}
	}),
	writeStep("names the held lease again", false, func(st *scenarioState, d *checkpointd.Document) { // lease_lost → unverified
		d.Leases = []checkpointd.LeaseRef{{LeaseID: st.lease.ID, FencingToken: st.lease.FencingToken}}
	}),
	{name: "release the lease", do: func(t *testing.T, w *oneStatementWorld, st *scenarioState) string {
		if err := w.s.ReleaseLease(t.Context(), st.lease.ID, st.run.ID, false); err != nil {
			t.Fatalf("ReleaseLease: %v", err)
		}
		return "lease released"
	}},
	writeStep("names the released lease", false, func(st *scenarioState, d *checkpointd.Document) {
		d.Leases = []checkpointd.LeaseRef{{LeaseID: st.lease.ID, FencingToken: st.lease.FencingToken}}
	}),
	writeStep("drops the lease", false, nil),
	writeStep("after the lease", true, nil),
	{name: "push at the session's head", do: func(t *testing.T, w *oneStatementWorld, st *scenarioState) string {
		return deliver(t, w, "d1", checkpointd.Observation{Branch: "fix-12", Head: st.head})
	}},
	// The settle made the session valid after its last write: a response
	// rendered ahead would say unverified.
	{name: "with a key, validity moved since the last write", do: func(t *testing.T, w *oneStatementWorld, st *scenarioState) string {
		return idempotentWrite(t, w, st, "k0", false)
	}},
	writeStep("at the live head", true, nil),
	writeStep("no head", false, func(_ *scenarioState, d *checkpointd.Document) { d.Workspace.Head = "" }),
	writeStep("back at the live head", false, nil),
	{name: "push moves the branch", do: func(t *testing.T, w *oneStatementWorld, st *scenarioState) string {
		return deliver(t, w, "d2", checkpointd.Observation{Branch: "fix-12", Before: st.head, Head: headB})
	}},
	writeStep("at the old head (stale)", false, nil),
	// Stale stays stale on the same evidence: nothing to record, the one
	// statement takes it.
	writeStep("at the old head again (still stale)", true, nil),
	{name: "catch up", do: func(_ *testing.T, _ *oneStatementWorld, st *scenarioState) string {
		st.head = headB
		return "head " + headB
	}},
	writeStep("at the new head", false, nil),
	writeStep("at the new head again", true, nil),
	// The same head observed again moves no verdict but the ref's version:
	// the statement checks the evidence by version, and declines.
	{name: "the push is redelivered", do: func(t *testing.T, w *oneStatementWorld, st *scenarioState) string {
		return deliver(t, w, "d2-again", checkpointd.Observation{Branch: "fix-12", Before: headA, Head: headB})
	}},
	writeStep("after a newer observation of the same head", false, nil),
	writeStep("after that, on the evidence seen", true, nil),
	{name: "the PR is seen at another head", do: func(t *testing.T, w *oneStatementWorld, st *scenarioState) string {
		return deliver(t, w, "d4", checkpointd.Observation{PR: 34, Head: headC})
	}},
	// The settle judged the session by the PR's head (stale); a write is
	// judged by its branch's, which wins (store/liverefs.go liveRef).
	writeStep("the branch's head decides, not the PR's", false, nil),
	writeStep("the branch's head decides again", true, nil),
	{name: "the PR catches up", do: func(t *testing.T, w *oneStatementWorld, st *scenarioState) string {
		return deliver(t, w, "d5", checkpointd.Observation{PR: 34, Head: headB})
	}},
	writeStep("names another repo", false, func(_ *scenarioState, d *checkpointd.Document) { d.Target.Repo = "other/repo" }),
	writeStep("names another role", false, func(_ *scenarioState, d *checkpointd.Document) { d.Role = "reviewer" }),
	{name: "out of scope", do: func(t *testing.T, w *oneStatementWorld, st *scenarioState) string {
		return outcome(w.s.WriteCheckpoint(t.Context(), store.CheckpointWrite{SessionID: st.sess.ID, Doc: st.doc("x"),
			Digest: "hmac-sha256:v1:00", InScope: func(repo string) bool { return repo == "someone/else" }}))
	}},
	writeStep("in scope again", true, nil),
	{name: "with an Idempotency-Key", oneStatement: true, do: func(t *testing.T, w *oneStatementWorld, st *scenarioState) string {
		return idempotentWrite(t, w, st, "k1", false)
	}},
	{name: "with a key whose claim was taken over", do: func(t *testing.T, w *oneStatementWorld, st *scenarioState) string {
		return idempotentWrite(t, w, st, "k2", true)
	}},
	{name: "a replica writes", do: func(t *testing.T, w *oneStatementWorld, st *scenarioState) string {
		return outcome(write(t.Context(), w.r, st.sess.ID, st.doc("replica")))
	}},
	writeStep("after the replica's write (seq taken)", false, nil),
	writeStep("after that", true, nil),
	writeStep("moves to another branch", false, func(st *scenarioState, d *checkpointd.Document) {
		st.branch = "fix-13"
		d.Workspace.Branch = st.branch
	}),
	writeStep("on the new branch", true, nil),
	{name: "take over", do: func(t *testing.T, w *oneStatementWorld, st *scenarioState) string {
		run, err := w.s.StartRun(t.Context(), st.sess.ID, store.NewRun{Takeover: true, Reason: "crashed",
			Agent: checkpointd.Agent{Runtime: "claude-code", Instance: "host-8/pid-2"}})
		if err != nil {
			t.Fatalf("StartRun: %v", err)
		}
		st.old, st.run = st.run, run.Run
		w.id(run.ID)
		return "run started"
	}},
	writeStep("the superseded run writes", false, func(st *scenarioState, d *checkpointd.Document) {
		d.RunID, d.FencingToken = st.old.ID, st.old.FencingToken
	}),
	writeStep("the new run writes", true, nil),
	writeStep("the new run writes at the old token", false, func(st *scenarioState, d *checkpointd.Document) { d.FencingToken = st.old.FencingToken }),
	writeStep("the new run again", true, nil),
	{name: "the branch is deleted", do: func(t *testing.T, w *oneStatementWorld, st *scenarioState) string {
		return deliver(t, w, "d3", checkpointd.Observation{Branch: "fix-13", Head: st.head, End: checkpointd.RefDeleted})
	}},
	writeStep("after the deletion (invalidated)", false, nil),
	writeStep("after the deletion again (invalidated is final)", true, nil),
	{name: "end", do: func(t *testing.T, w *oneStatementWorld, st *scenarioState) string {
		if _, err := w.s.EndSession(t.Context(), st.sess.ID, st.run.ID, checkpointd.OutcomeCompleted); err != nil {
			t.Fatalf("EndSession: %v", err)
		}
		return "ended"
	}},
	writeStep("after the end", false, nil),
}

// TestOneStatementWriteMatchesTransaction runs one scenario twice on
// PostgreSQL, with the one-statement write and with the transaction alone,
// and compares each answer and every row after each step. It also checks
// that the one statement took exactly the writes it should: every refusal,
// lost lease, move, change of validity and seq taken elsewhere goes to the
// transaction.
func TestOneStatementWriteMatchesTransaction(t *testing.T) {
	worlds := []*oneStatementWorld{newOneStatementWorld(t, true), newOneStatementWorld(t, false)}
	states := make([]*scenarioState, 2)
	for i, w := range worlds {
		sess := newSession(t, w.s, "owner/name")
		w.id(sess.ID)
		w.id(sess.CurrentRun.ID)
		states[i] = &scenarioState{sess: sess, run: sess.CurrentRun, head: headA, branch: "fix-12"}
	}
	for _, step := range oneStatementScenario {
		var answers, dumps [2]string
		for i, w := range worlds {
			w.clock.Advance(7 * time.Second)
			before, _ := store.OneStatementWrites(w.s)
			answers[i] = w.normal(step.do(t, w, states[i]))
			after, declined := store.OneStatementWrites(w.s)
			took := after > before
			if w.oneStmt && took != step.oneStatement {
				t.Errorf("%s: one statement took it: %v, want %v (declines so far %v; answer %s)", step.name, took, step.oneStatement, declined, answers[i])
			}
			if !w.oneStmt && took {
				t.Errorf("%s: the one statement ran while off", step.name)
			}
			dumps[i] = w.dump(t, states[i].sess.ID)
		}
		if answers[0] != answers[1] {
			t.Fatalf("%s: answers differ:\none statement: %s\ntransaction:   %s", step.name, answers[0], answers[1])
		}
		if dumps[0] != dumps[1] {
			t.Fatalf("%s: rows differ:\none statement:\n%s\ntransaction:\n%s", step.name, dumps[0], dumps[1])
		}
		t.Logf("%-45s %s", step.name, answers[0])
	}
}

// TestOneStatementWritesRaceAcrossReplicas: writers on two replicas and
// several goroutines each write to one session at once. Predictions of the
// next seq collide all the time; every write must still land once, at
// consecutive seqs, sealed for its own seq, each with its event.
func TestOneStatementWritesRaceAcrossReplicas(t *testing.T) {
	w := newOneStatementWorld(t, true)
	sess := newSession(t, w.s, "owner/name")
	ctx := t.Context()
	if _, err := write(ctx, w.s, sess.ID, doc(sess.CurrentRun, "start")); err != nil {
		t.Fatal(err)
	}
	if _, err := write(ctx, w.r, sess.ID, doc(sess.CurrentRun, "start")); err != nil {
		t.Fatal(err)
	}
	const perWriter = 25
	var wg sync.WaitGroup
	errs := make(chan error, 8*perWriter)
	for i := range 8 {
		s := w.s
		if i%2 == 1 {
			s = w.r
		}
		wg.Go(func() {
			for n := range perWriter {
				if _, err := write(ctx, s, sess.ID, doc(sess.CurrentRun, fmt.Sprintf("w%d-%d", i, n))); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("write: %v", err)
	}
	const total = 2 + 8*perWriter
	got, err := w.s.GetSession(ctx, sess.ID)
	if err != nil || got.Latest == nil || got.Latest.Seq != total {
		t.Fatalf("session %+v (%v), want its latest checkpoint at seq %d", got, err, total)
	}
	stages := map[string]bool{}
	for seq := int64(1); seq <= total; seq++ {
		cp, err := w.s.GetCheckpoint(ctx, sess.ID, seq)
		if err != nil {
			t.Fatalf("checkpoint %d: %v", seq, err)
		}
		if cp.Recovery == nil || cp.Recovery.Instructions == "" {
			t.Fatalf("checkpoint %d lost its sealed part", seq)
		}
		stages[cp.Stage] = true
	}
	if len(stages) != total-1 { // the two first writes share a stage
		t.Errorf("%d distinct stages in %d checkpoints: a write landed twice or not at all", len(stages), total)
	}
	var written int
	if err := w.raw.QueryRowContext(ctx, `SELECT count(*) FROM events WHERE kind = $1 AND session_id = $2`,
		checkpointd.EventCheckpointWritten, sess.ID).Scan(&written); err != nil || written != total {
		t.Errorf("%d checkpoint events (%v), want %d", written, err, total)
	}
	kinds(t, w.s, sess.ID) // no gap in the event log
	takenS, declinedS := store.OneStatementWrites(w.s)
	takenR, declinedR := store.OneStatementWrites(w.r)
	t.Logf("one statement: %d+%d writes; declined %v / %v", takenS, takenR, declinedS, declinedR)
	if takenS+takenR == 0 {
		t.Error("the one statement took none of the writes")
	}
	if declinedS["row"]+declinedR["row"] == 0 {
		t.Error("no prediction collided: the race did not happen")
	}
}

// TestOneStatementWriteStoreDown: the database goes away under a replica
// that knows its session; the write is refused as store_unavailable, the
// next one after the database is back lands at the next seq.
func TestOneStatementWriteStoreDown(t *testing.T) {
	raw := storetest.URL(t, storetest.Postgres)
	p := storetest.NewProxy(t, raw, "onestatement-a")
	s := storetest.OpenURL(t, p.URL, checkpointd.SystemClock{})
	ctx := t.Context()
	sess := newSession(t, s, "owner/name")
	for range 2 {
		if _, err := write(ctx, s, sess.ID, doc(sess.CurrentRun, "x")); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := store.OneStatementWrites(s)
	p.Cut()
	if _, err := write(ctx, s, sess.ID, doc(sess.CurrentRun, "down")); !errors.Is(err, checkpointd.ErrStoreUnavailable) {
		t.Fatalf("write with the database gone: %v, want ErrStoreUnavailable", err)
	}
	p.Restore()
	var cp *checkpointd.Checkpoint
	var err error
	for range 50 { // the pool finds out its connections are gone
		if cp, err = write(ctx, s, sess.ID, doc(sess.CurrentRun, "back")); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil || cp.Seq != 3 {
		t.Fatalf("write after the database came back: %v, %v; want seq 3", cp, err)
	}
	if cp, err = write(ctx, s, sess.ID, doc(sess.CurrentRun, "after")); err != nil || cp.Seq != 4 {
		t.Fatalf("the write after: %v, %v; want seq 4", cp, err)
	}
	if after, _ := store.OneStatementWrites(s); after <= before {
		t.Errorf("the one statement took none of the writes (%d before, %d after)", before, after)
	}
}
