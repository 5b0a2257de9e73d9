package store_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// batchWorld is a PostgreSQL store whose one-statement writes run on one
// runner, so a held runner gathers every waiting write into its next
// call, and sessions it has written twice (the first write is the
// transaction's, the second the statement's: the next is predicted).
type batchWorld struct {
	s     *store.Store
	sess  []*checkpointd.Session
	ctx   context.Context
	calls int64
}

func newBatchWorld(t *testing.T, s *store.Store, n int) *batchWorld {
	t.Helper()
	store.SetWriteBatchRunners(s, 1)
	w := &batchWorld{s: s, ctx: t.Context()}
	for i := range n {
		sess := newSession(t, s, "owner/name")
		for k := range 2 {
			if _, err := write(w.ctx, s, sess.ID, doc(sess.CurrentRun, fmt.Sprintf("setup-%d-%d", i, k))); err != nil {
				t.Fatalf("setup write: %v", err)
			}
		}
		w.sess = append(w.sess, sess)
	}
	w.calls, _ = store.WriteBatchCalls(s)
	return w
}

// newBatchWorldRaw is newBatchWorld on a fresh PostgreSQL database, with a
// connection of the test's own to it.
func newBatchWorldRaw(t *testing.T, n int) (*batchWorld, *sql.DB) {
	t.Helper()
	url := storetest.URL(t, storetest.Postgres)
	s := storetest.OpenURL(t, url, checkpointd.SystemClock{})
	return newBatchWorld(t, s, n), openRaw(t, storetest.Postgres, url)
}

// together runs the writes at once and returns their answers once all
// are back. The runner holds the first it takes until every one waits for
// it, and one call carries them all.
func (w *batchWorld) together(t *testing.T, writes []func() (*checkpointd.Checkpoint, error)) ([]*checkpointd.Checkpoint, []error) {
	t.Helper()
	_, holding, release := store.HoldWriteBatches(w.s, len(writes))
	defer release()
	cps, errs := make([]*checkpointd.Checkpoint, len(writes)), make([]error, len(writes))
	var wg sync.WaitGroup
	for i, write := range writes {
		wg.Go(func() { cps[i], errs[i] = write() })
	}
	for deadline := time.Now().Add(10 * time.Second); holding() < 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no write reached the runner")
		}
	}
	release()
	wg.Wait()
	return cps, errs
}

// TestBatchedWritesMixedOutcomes: one call carries seven writes. Three are
// plain (one with an Idempotency-Key); one is a second write of a session
// already in the call, and one's seq was taken by another replica (both
// declined before their rows are touched); one names a lease at a wrong
// token (declined after: its subtransaction rolls back) and one fails
// inside the database on its first try. The plain three land from the
// call; the others are answered by the transaction, each exactly once, as
// if alone.
func TestBatchedWritesMixedOutcomes(t *testing.T) {
	url := storetest.URL(t, storetest.Postgres)
	clock := checkpointd.NewManualClock(t0)
	s, replica := storetest.OpenURL(t, url, clock), storetest.OpenURL(t, url, clock)
	raw := openRaw(t, storetest.Postgres, url)
	w := newBatchWorld(t, s, 6)
	ctx := t.Context()
	const twice, keyed, taken, leased, failing = 0, 1, 3, 4, 5

	if _, err := write(ctx, replica, w.sess[taken].ID, doc(w.sess[taken].CurrentRun, "replica")); err != nil {
		t.Fatal(err)
	}
	lease, err := s.AcquireLease(ctx, store.NewLease{Resource: checkpointd.Resource{Kind: checkpointd.ResourceIssue,
		Repo: "owner/name", Number: 12}, SessionID: w.sess[leased].ID, RunID: w.sess[leased].CurrentRun.ID, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// The first insert of this session's checkpoint fails (a sequence is
	// not rolled back with the subtransaction, so the retry passes).
	if _, err := raw.ExecContext(ctx, fmt.Sprintf(`CREATE SEQUENCE batch_test_tries;
CREATE FUNCTION batch_test_fail() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.session_id = '%s' AND nextval('batch_test_tries') = 1 THEN
        RAISE EXCEPTION 'refused once' USING ERRCODE = '23514';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER batch_test_fail BEFORE INSERT ON checkpoints FOR EACH ROW EXECUTE FUNCTION batch_test_fail();`,
		w.sess[failing].ID)); err != nil {
		t.Fatal(err)
	}
	scope, key := "checkpoints:"+w.sess[keyed].ID, "batched-1"
	claim, replay, err := s.ClaimIdempotency(ctx, scope, key, "sha256:request")
	if err != nil || replay != nil {
		t.Fatalf("ClaimIdempotency: %v, %v", replay, err)
	}

	type job struct {
		sess int
		doc  *checkpointd.Document
	}
	var jobs []job
	for i, sess := range w.sess {
		jobs = append(jobs, job{i, doc(sess.CurrentRun, fmt.Sprintf("together-%d", i))})
	}
	jobs = append(jobs, job{twice, doc(w.sess[twice].CurrentRun, "together-again")})
	jobs[leased].doc.Leases = []checkpointd.LeaseRef{{LeaseID: lease.ID, FencingToken: lease.FencingToken + 1}}
	// Started against the call's order (it sorts by session), so that an
	// answer given to the wrong write shows.
	slices.SortStableFunc(jobs, func(a, b job) int { return strings.Compare(w.sess[b.sess].ID, w.sess[a.sess].ID) })
	writes := make([]func() (*checkpointd.Checkpoint, error), len(jobs))
	for i, j := range jobs {
		cw := store.CheckpointWrite{SessionID: w.sess[j.sess].ID, Doc: j.doc, Digest: "hmac-sha256:v1:00"}
		if j.sess == keyed {
			cw.Idempotency = &store.Idempotency{Scope: scope, Key: key, Claim: claim, Status: 201,
				Render: func(res any) ([]byte, error) { return json.Marshal(res) }}
		}
		writes[i] = func() (*checkpointd.Checkpoint, error) { return s.WriteCheckpoint(ctx, cw) }
	}
	tookBefore, declinedBefore := store.OneStatementWrites(s)
	cps, errs := w.together(t, writes)

	calls, largest := store.WriteBatchCalls(s)
	if calls-w.calls != 1 || largest != int64(len(jobs)) {
		t.Fatalf("%d calls, the largest of %d writes; want one of %d", calls-w.calls, largest, len(jobs))
	}
	tookAfter, declinedAfter := store.OneStatementWrites(s)
	if got := tookAfter - tookBefore; got != 3 {
		t.Errorf("the call wrote %d checkpoints, want the 3 plain ones", got)
	}
	for reason, want := range map[string]int64{"row": 2, "lease": 1, "error": 1} {
		if got := declinedAfter[reason] - declinedBefore[reason]; got != want {
			t.Errorf("declined for %q: %d, want %d (all: %v)", reason, got, want, declinedAfter)
		}
	}
	seqs := map[int][]int64{}
	for i, j := range jobs {
		if errs[i] != nil {
			t.Fatalf("write %d (session %d): %v", i, j.sess, errs[i])
		}
		if cps[i].SessionID != w.sess[j.sess].ID || cps[i].Stage != j.doc.Stage {
			t.Errorf("write %d answered session %s stage %q, want %s %q", i, cps[i].SessionID, cps[i].Stage, w.sess[j.sess].ID, j.doc.Stage)
		}
		if wantComplete := j.sess != leased; cps[i].Complete != wantComplete {
			t.Errorf("write %d complete %v (missing %v), want %v", i, cps[i].Complete, cps[i].Missing, wantComplete)
		}
		seqs[j.sess] = append(seqs[j.sess], cps[i].Seq)
		var n int
		if err := raw.QueryRowContext(ctx, `SELECT count(*) FROM checkpoints WHERE session_id = $1 AND stage = $2 AND seq = $3`,
			w.sess[j.sess].ID, j.doc.Stage, cps[i].Seq).Scan(&n); err != nil || n != 1 {
			t.Errorf("write %d: %d checkpoints at its answer's seq and stage (%v), want 1", i, n, err)
		}
	}
	for i, sess := range w.sess {
		want := []int64{3}
		switch i {
		case twice:
			want = []int64{3, 4}
		case taken:
			want = []int64{4} // after the replica's
		}
		got := slices.Sorted(slices.Values(seqs[i]))
		if !slices.Equal(got, want) {
			t.Errorf("session %d answered seqs %v, want %v", i, got, want)
		}
		if latest, err := s.GetSession(ctx, sess.ID); err != nil || latest.Latest == nil || latest.Latest.Seq != want[len(want)-1] {
			t.Errorf("session %d: %+v (%v), want its latest at seq %d", i, latest, err, want[len(want)-1])
		}
		kinds(t, s, sess.ID) // no gap in the event log
	}
	// The keyed write's answer is stored for its retries.
	_, replay, err = s.ClaimIdempotency(ctx, scope, key, "sha256:request")
	if err != nil || replay == nil || replay.Status != 201 {
		t.Fatalf("the retry of the keyed write: %+v, %v; want a replay", replay, err)
	}
	var replayed checkpointd.Checkpoint
	if err := json.Unmarshal(replay.Body, &replayed); err != nil || replayed.Seq != 3 || replayed.Stage != "together-1" {
		t.Errorf("replayed %s (%v), want seq 3 of together-1", replay.Body, err)
	}
}

// TestBatchedWritesStoreDown: the database goes away while a call's
// writes wait for it. Every one is refused as store_unavailable and none
// landed: each session's next write, once the database is back, takes the
// next seq.
func TestBatchedWritesStoreDown(t *testing.T) {
	raw := storetest.URL(t, storetest.Postgres)
	p := storetest.NewProxy(t, raw, "writebatch-a")
	s := storetest.OpenURL(t, p.URL, checkpointd.SystemClock{})
	w := newBatchWorld(t, s, 4)
	docs := make([]*checkpointd.Document, len(w.sess))
	for i, sess := range w.sess {
		docs[i] = doc(sess.CurrentRun, "down")
	}
	_, holding, release := store.HoldWriteBatches(s, len(docs))
	defer release()
	errs := make([]error, len(docs))
	var wg sync.WaitGroup
	for i, d := range docs {
		wg.Go(func() { _, errs[i] = write(w.ctx, s, w.sess[i].ID, d) })
	}
	for deadline := time.Now().Add(10 * time.Second); holding() < 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no write reached the runner")
		}
	}
	p.Cut()
	release()
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, checkpointd.ErrStoreUnavailable) {
			t.Errorf("write %d with the database gone: %v, want ErrStoreUnavailable", i, err)
		}
	}
	p.Restore()
	for i, sess := range w.sess {
		var cp *checkpointd.Checkpoint
		var err error
		for range 50 { // the pool finds out its connections are gone
			if cp, err = write(w.ctx, s, sess.ID, doc(sess.CurrentRun, "back")); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil || cp.Seq != 3 {
			t.Fatalf("session %d after the database came back: %v, %v; want seq 3", i, cp, err)
		}
	}
}

// TestBatchedWriteGivesUpWhileWaiting: a write whose request ends while it
// waits for a runner leaves without being sent: refused, nothing written,
// and the others of the call land.
func TestBatchedWriteGivesUpWhileWaiting(t *testing.T) {
	s := storetest.Open(t, storetest.Postgres, checkpointd.SystemClock{})
	w := newBatchWorld(t, s, 2)
	queued, holding, release := store.HoldWriteBatches(s, 0)
	defer release()
	first := make(chan error, 1)
	go func() {
		_, err := write(w.ctx, s, w.sess[0].ID, doc(w.sess[0].CurrentRun, "kept"))
		first <- err
	}()
	// The runner holds the first write; the second waits to be taken.
	for deadline := time.Now().Add(10 * time.Second); holding() < 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first write was not taken")
		}
	}
	ctx, cancel := context.WithCancel(w.ctx)
	second := make(chan error, 1)
	go func() {
		_, err := write(ctx, s, w.sess[1].ID, doc(w.sess[1].CurrentRun, "abandoned"))
		second <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); queued() < 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the second write is not waiting")
		}
	}
	cancel()
	select {
	case err := <-second:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the abandoned write: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the abandoned write still waits for the held runner")
	}
	release()
	if err := <-first; err != nil {
		t.Fatalf("the held write: %v", err)
	}
	for i, want := range []int64{3, 2} {
		got, err := s.GetSession(w.ctx, w.sess[i].ID)
		if err != nil || got.Latest == nil || got.Latest.Seq != want {
			t.Errorf("session %d: %+v (%v), want its latest at seq %d", i, got, err, want)
		}
	}
}

// TestBatchedWriteDoesNotWaitForALockedRow: another transaction holds one
// session's row. The call's other writes land at once; that one leaves the
// call (lock_timeout) and lands, through the transaction, when the row is
// free.
func TestBatchedWriteDoesNotWaitForALockedRow(t *testing.T) {
	w, raw := newBatchWorldRaw(t, 3)
	s := w.s
	ctx := t.Context()
	tx, err := raw.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SELECT 1 FROM sessions WHERE id = $1 FOR UPDATE`, w.sess[0].ID); err != nil {
		t.Fatal(err)
	}
	_, declinedBefore := store.OneStatementWrites(s)
	docs := make([]*checkpointd.Document, len(w.sess))
	for i, sess := range w.sess {
		docs[i] = doc(sess.CurrentRun, "locked")
	}
	type result struct {
		cps  []*checkpointd.Checkpoint
		errs []error
	}
	writes := make([]func() (*checkpointd.Checkpoint, error), len(docs))
	for i, d := range docs {
		writes[i] = func() (*checkpointd.Checkpoint, error) { return write(ctx, s, w.sess[i].ID, d) }
	}
	done := make(chan result, 1)
	go func() {
		cps, errs := w.together(t, writes)
		done <- result{cps, errs}
	}()
	// While the row stays locked, the others land.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		landed := 0
		for _, sess := range w.sess[1:] {
			if got, err := s.GetSession(ctx, sess.ID); err == nil && got.Latest != nil && got.Latest.Seq == 3 {
				landed++
			}
		}
		if landed == len(w.sess)-1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d writes landed while another session's row was locked", landed, len(w.sess)-1)
		}
	}
	select {
	case <-done:
		t.Fatal("the write of the locked session returned while its row was locked")
	default:
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	r := <-done
	for i, err := range r.errs {
		if err != nil || r.cps[i].Seq != 3 {
			t.Fatalf("write %d: %v, %v; want seq 3", i, r.cps[i], err)
		}
	}
	if _, declined := store.OneStatementWrites(s); declined["error"]-declinedBefore["error"] != 1 {
		t.Errorf("declines %v, want one more \"error\" (the lock timeout) than %v", declined, declinedBefore)
	}
}

// TestBatchedWriteKeepsControlCharacters: the call joins its writes' long
// values with U+001E. A document that holds that character, in its clear
// and its sealed part, is still taken by the call (JSON escapes it) and
// reads back as written.
func TestBatchedWriteKeepsControlCharacters(t *testing.T) {
	s := storetest.Open(t, storetest.Postgres, checkpointd.SystemClock{})
	w := newBatchWorld(t, s, 1)
	d := doc(w.sess[0].CurrentRun, "control")
	d.NextAction.Action = "run\x1etests\x00"
	d.Recovery.Instructions = "git fetch\x1e&& git checkout fix-12"
	took, _ := store.OneStatementWrites(s)
	cp, err := write(w.ctx, s, w.sess[0].ID, d)
	if err != nil {
		t.Fatal(err)
	}
	if after, declined := store.OneStatementWrites(s); after != took+1 {
		t.Errorf("the call did not take the write (declines %v)", declined)
	}
	got, err := s.GetCheckpoint(w.ctx, w.sess[0].ID, cp.Seq)
	if err != nil {
		t.Fatal(err)
	}
	if got.NextAction.Action != d.NextAction.Action || got.Recovery.Instructions != d.Recovery.Instructions {
		t.Errorf("read back %q / %q, want %q / %q", got.NextAction.Action, got.Recovery.Instructions,
			d.NextAction.Action, d.Recovery.Instructions)
	}
}

// TestBatchedWritesUnderLoad: 16 writers, each on its own session, with
// the runners a host of this size gets: calls carry several writes, some
// wait for company while another is at the database, and every write
// lands once, at consecutive seqs, with its event.
func TestBatchedWritesUnderLoad(t *testing.T) {
	s := storetest.Open(t, storetest.Postgres, checkpointd.SystemClock{})
	ctx := t.Context()
	const writers, each = 16, 15
	sessions := make([]*checkpointd.Session, writers)
	for i := range sessions {
		sessions[i] = newSession(t, s, "owner/name")
		if _, err := write(ctx, s, sessions[i].ID, doc(sessions[i].CurrentRun, "first")); err != nil {
			t.Fatal(err)
		}
	}
	calls0, _ := store.WriteBatchCalls(s)
	took0, _ := store.OneStatementWrites(s)
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for _, sess := range sessions {
		wg.Go(func() {
			for n := range each {
				if _, err := write(ctx, s, sess.ID, doc(sess.CurrentRun, fmt.Sprint("load-", n))); err != nil {
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
	calls, largest := store.WriteBatchCalls(s)
	took, declined := store.OneStatementWrites(s)
	t.Logf("%d writes in %d calls, the largest %d; declined %v", took-took0, calls-calls0, largest, declined)
	if took-took0 != writers*each {
		t.Errorf("the calls wrote %d of %d", took-took0, writers*each)
	}
	if calls-calls0 >= writers*each || largest < 2 {
		t.Errorf("%d calls for %d writes, the largest %d: nothing went together", calls-calls0, writers*each, largest)
	}
	for _, sess := range sessions {
		got, err := s.GetSession(ctx, sess.ID)
		if err != nil || got.Latest == nil || got.Latest.Seq != each+1 || got.Latest.Stage != fmt.Sprint("load-", each-1) {
			t.Fatalf("session %s: %+v (%v), want its latest at seq %d", sess.ID, got, err, each+1)
		}
		if k := kinds(t, s, sess.ID); len(k) < each+1 {
			t.Errorf("session %s: %d events", sess.ID, len(k))
		}
	}
}

// sleepOnFirstCheckpoint makes the next checkpoint insert sleep for
// seconds, once (a sequence is not rolled back with its statement), so a
// call is caught while it runs.
func sleepOnFirstCheckpoint(t *testing.T, raw *sql.DB, seconds int) {
	t.Helper()
	if _, err := raw.ExecContext(t.Context(), fmt.Sprintf(`CREATE SEQUENCE batch_test_sleeps;
CREATE FUNCTION batch_test_sleep() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF nextval('batch_test_sleeps') = 1 THEN
        PERFORM pg_sleep(%d);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER batch_test_sleep BEFORE INSERT ON checkpoints FOR EACH ROW EXECUTE FUNCTION batch_test_sleep();`, seconds)); err != nil {
		t.Fatal(err)
	}
}

// TestBatchedCallRolledBackFallsBack: a call the database refuses as a
// whole (here cancelled while it runs, which no element's block catches)
// is rolled back whole, so each of its writes runs again in the
// transaction and lands once; none is refused for it.
func TestBatchedCallRolledBackFallsBack(t *testing.T) {
	w, raw := newBatchWorldRaw(t, 3)
	s := w.s
	ctx := t.Context()
	sleepOnFirstCheckpoint(t, raw, 30) // long enough to be cancelled
	writes := make([]func() (*checkpointd.Checkpoint, error), len(w.sess))
	for i, sess := range w.sess {
		writes[i] = func() (*checkpointd.Checkpoint, error) {
			return write(ctx, s, sess.ID, doc(sess.CurrentRun, "cancelled"))
		}
	}
	_, declinedBefore := store.OneStatementWrites(s)
	cancelled := make(chan error, 1)
	go func() {
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			var ok bool
			err := raw.QueryRowContext(ctx, `SELECT coalesce(bool_or(pg_cancel_backend(pid)), false) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event = 'PgSleep' AND query LIKE '%checkpointd_write_checkpoints(%'`).Scan(&ok)
			if err != nil || ok {
				cancelled <- err
				return
			}
		}
		cancelled <- errors.New("the call never ran")
	}()
	cps, errs := w.together(t, writes)
	if err := <-cancelled; err != nil {
		t.Fatalf("cancelling the call: %v", err)
	}
	for i, err := range errs {
		if err != nil || cps[i].Seq != 3 {
			t.Errorf("write %d: %v, %v; want seq 3", i, cps[i], err)
		}
	}
	if _, declined := store.OneStatementWrites(s); declined["error"]-declinedBefore["error"] != int64(len(w.sess)) {
		t.Errorf("declines %v, want %d more \"error\" than %v", declined, len(w.sess), declinedBefore)
	}
	for i, sess := range w.sess {
		var n int
		if err := raw.QueryRowContext(ctx, `SELECT count(*) FROM checkpoints WHERE session_id = $1 AND stage = 'cancelled'`,
			sess.ID).Scan(&n); err != nil || n != 1 {
			t.Errorf("session %d: %d checkpoints of the write (%v), want 1", i, n, err)
		}
	}
}

// TestBatchedCallLostAfterSendNotRepeated: the connection of a call is
// lost while the call runs. Its outcome is unknown to the daemon: every
// write of it is refused as store_unavailable, and none is sent again
// (database/sql retries a statement on a bad pooled connection; the call
// must not be, nor its writes run again in the transaction), so none lands
// twice. On a pooled connection a write landed twice here.
func TestBatchedCallLostAfterSendNotRepeated(t *testing.T) {
	url := storetest.URL(t, storetest.Postgres)
	p := storetest.NewProxy(t, url, "writebatch-lost")
	s := storetest.OpenURL(t, p.URL, checkpointd.SystemClock{})
	raw := openRaw(t, storetest.Postgres, url)
	w := newBatchWorld(t, s, 3)
	ctx := t.Context()
	sleepOnFirstCheckpoint(t, raw, 1)
	sleeping := func() (n int) {
		if err := raw.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
AND wait_event = 'PgSleep' AND query LIKE '%checkpointd_write_checkpoints(%'`).Scan(&n); err != nil {
			t.Error(err)
		}
		return n
	}
	cut := make(chan error, 1)
	go func() {
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if sleeping() > 0 {
				p.Cut()
				p.Restore()
				cut <- nil
				return
			}
		}
		cut <- errors.New("the call never ran")
	}()
	writes := make([]func() (*checkpointd.Checkpoint, error), len(w.sess))
	for i, sess := range w.sess {
		writes[i] = func() (*checkpointd.Checkpoint, error) { return write(ctx, s, sess.ID, doc(sess.CurrentRun, "lost")) }
	}
	_, errs := w.together(t, writes)
	if err := <-cut; err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if !errors.Is(err, checkpointd.ErrStoreUnavailable) {
			t.Errorf("write %d, its call's connection lost: %v, want ErrStoreUnavailable", i, err)
		}
	}
	// The call's backend goes on alone until it ends (commits or not).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var n int
		if err := raw.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
AND state = 'active' AND pid <> pg_backend_pid() AND query LIKE '%checkpointd_write_checkpoints(%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the call still runs")
		}
	}
	// Whether it committed depends on when the database noticed the
	// connection gone; that a write landed twice never may. (One query:
	// one snapshot of the three sessions.)
	landed := map[string]int{}
	rows, err := raw.QueryContext(ctx, `SELECT session_id, count(*) FROM checkpoints WHERE stage = 'lost' GROUP BY session_id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		landed[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for i, sess := range w.sess {
		if n := landed[sess.ID]; n > 1 || n != landed[w.sess[0].ID] {
			t.Errorf("session %d: its write landed %d times (all: %v), want at most once, as every other of the call", i, n, landed)
		}
	}
	t.Logf("the call's writes landed %v", landed)
}
