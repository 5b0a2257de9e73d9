package store

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/migrations"
)

// The one-statement checkpoint write (PostgreSQL). WriteCheckpoint's
// transaction costs six round trips: BEGIN, the session row, the live ref,
// the checkpoint, the event, COMMIT. Its common outcome (a new checkpoint
// at the seq after the last, the session's verdict unchanged, nothing
// moving) fits in one call of checkpointd_write_checkpoint (migration
// 00025). The write is judged here, by checkpointd.JudgeWrite, on the
// evidence this replica's last write of the session saw; the call only
// checks by version that the evidence still stands (the session row at the
// previous seq with the run, token, binding and verdict judged from; each
// named lease held at its token; the bound live ref at the version judged)
// and applies the judgement. It never judges. Those calls of several
// sessions' writes run together in one autocommit statement, each in a
// subtransaction of its own (writebatch.go), so a row lock it takes lasts
// until that statement's commit. Everything else (the first write of a
// session on this replica, a seq another replica took, a refusal of any
// kind, a lease lost, a move to another ref, a change of verdict, a live
// ref observed since, a claim taken over), and a write that fails in the
// call (a row locked elsewhere, any error), is rolled back before anything
// of it lands, and the transaction judges again and answers. So the one
// statement never answers anything but a write the transaction would have
// made identically; TestOneStatementWriteMatchesTransaction holds the two
// to the same rows.

// writtenSession is what a session's next checkpoint write must know
// before its statement: the repo and role (they never change: the scope
// and binding are checked on them first), the seq it was last seen at (the
// document is sealed for the next one), and the evidence its last write
// was judged on: the verdict it left and the live ref, with its version.
type writtenSession struct {
	repo, role  string
	seq         int64
	verdict     checkpointd.Verdict
	live        *checkpointd.LiveRef
	liveVersion int64
}

// maxWrittenSessions bounds the map; when full it starts over (the next
// write of each session then runs the transaction once).
const maxWrittenSessions = 1 << 14

// writtenSessions are the sessions this store wrote checkpoints for.
type writtenSessions struct {
	mu sync.Mutex
	m  map[string]writtenSession
	// off turns the one-statement write off (tests compare the two).
	off atomic.Bool
	// taken and declined count outcomes, by decline reason (tests).
	taken    atomic.Int64
	declines sync.Map // reason → *atomic.Int64
}

func (w *writtenSessions) get(id string) (writtenSession, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	v, ok := w.m[id]
	return v, ok
}

func (w *writtenSessions) set(id string, v writtenSession) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil || len(w.m) >= maxWrittenSessions {
		w.m = make(map[string]writtenSession)
	}
	w.m[id] = v
}

func (w *writtenSessions) decline(reason string) {
	n, ok := w.declines.Load(reason)
	if !ok {
		n, _ = w.declines.LoadOrStore(reason, new(atomic.Int64))
	}
	n.(*atomic.Int64).Add(1)
}

// writeInOneStatement writes w as one statement if it can. ok is false
// when it declined: nothing was written, and the caller runs the
// transaction. With ok true, err is the write's own failure.
func (s *Store) writeInOneStatement(ctx context.Context, w CheckpointWrite, cp *checkpointd.Checkpoint, in checkpointInput) (ok bool, err error) {
	if s.dialect != migrations.Postgres || s.written.off.Load() {
		return false, nil
	}
	known, found := s.written.get(w.SessionID)
	if !found {
		s.written.decline("first")
		return false, nil
	}
	doc := w.Doc
	if w.InScope != nil && !w.InScope(known.repo) {
		s.written.decline("binding")
		return false, nil
	}
	seq := known.seq + 1
	// Judged as if every lease the document names were held at its token:
	// the statement declines unless they are.
	ids := make([]string, 0, len(doc.Leases))
	tokens := make([]int64, 0, len(doc.Leases))
	held := make(map[string]int64, len(doc.Leases))
	for _, l := range doc.Leases {
		ids, tokens = append(ids, l.LeaseID), append(tokens, l.FencingToken)
		held[l.LeaseID] = l.FencingToken
	}
	j, err := checkpointd.JudgeWrite(checkpointd.WriteEvidence{Doc: doc, Repo: known.repo, Role: known.role, Held: held,
		Current: known.verdict, Live: known.live})
	if err != nil {
		s.written.decline("binding")
		return false, nil
	}
	if j.Changed {
		// A new verdict is recorded with its evidence: the transaction's.
		s.written.decline("validity")
		return false, nil
	}
	// A failure before the statement is the transaction's to answer: it
	// checks the session row first.
	missingJSON, err := json.Marshal(j.Missing)
	if err != nil {
		return false, nil
	}
	evData, err := checkpointWritten(seq, doc.Stage, j.Complete, j.Missing, w.Digest)
	if err != nil {
		return false, nil
	}
	// What the transaction would answer, if the statement writes.
	answer := *cp
	answer.Seq = seq
	parent := seq - 1
	answer.ParentSeq = &parent
	answer.Complete = j.Complete
	answer.Missing = j.Missing
	answer.Validity = j.Validity
	var idemScope, idemKey, idemClaim, idemResponse string
	var idemStatus int
	if idem := w.Idempotency; idem != nil {
		body, err := idem.Render(&answer)
		if err != nil {
			return false, nil
		}
		idemScope, idemKey, idemClaim, idemStatus = idem.Scope, idem.Key, idem.Claim, idem.Status
		idemResponse = s.keys.Seal(body, idemAAD(idem.Scope, idem.Key))
	}
	now, liveKey := in.now, ""
	if known.live != nil {
		liveKey = known.live.Key()
	}
	call := statementWrite{session: w.SessionID, run: doc.RunID, token: doc.FencingToken, repo: known.repo, role: known.role, seq: seq,
		now: micros(now), seenBefore: in.seenBefore, pr: in.pr, branch: in.ws.Branch, worktree: in.ws.Worktree, head: in.head,
		stage: doc.Stage, waitingOn: in.waitingOn, nextActor: in.nextActor, leaseIDs: ids, leaseTokens: tokens,
		complete: j.Complete, missing: string(missingJSON), wsBranch: in.ws.Branch, digest: w.Digest, redactions: int64(w.Redactions),
		document: string(in.clearJSON), sealed: s.keys.Seal(in.private, CheckpointAAD(w.SessionID, seq)),
		documentDigest: documentDigest(in.clearJSON), eventKind: checkpointd.EventCheckpointWritten, eventData: string(evData),
		repoKey: strings.ToLower(known.repo), validity: string(j.Validity), reason: j.Reason,
		liveRef: liveKey, liveVersion: known.liveVersion,
		idemScope: idemScope, idemKey: idemKey, idemClaim: idemClaim, idemStatus: int64(idemStatus), idemResponse: idemResponse}
	if !call.joinable() {
		s.written.decline("separator")
		return false, nil
	}
	if w.Idempotency != nil && w.Idempotency.Key == "" {
		// A key's presence goes to the call as a key that is not empty.
		s.written.decline("key")
		return false, nil
	}
	_, declined, err := s.writeBatched(ctx, call)
	if errors.Is(err, errBatchUnprepared) || errors.Is(err, errBatchRolledBack) {
		// No function (a schema older than this binary), the database
		// away, or the call rolled back whole: nothing landed, and the
		// transaction answers.
		s.written.decline("error")
		return false, nil
	}
	switch {
	case err != nil:
		// Whether it committed is unknown. What the map knows stays: if it
		// did, the next write's seq is declined, never written, and the
		// transaction's answer sets the map right.
		return true, s.classifyOp(OpWrite, err)
	case declined.Valid:
		// Declined (before or after the session row's update: rolled back
		// whole either way) or failed alone ("error <SQLSTATE>": the
		// transaction meets it again, retries a conflict, answers an
		// error). What the map knows stays, as above.
		reason, _, _ := strings.Cut(declined.String, " ")
		s.written.decline(reason)
		return false, nil
	}
	*cp = answer
	s.written.taken.Add(1)
	known.seq = seq
	s.written.set(w.SessionID, known)
	s.committed()
	return true, nil
}
