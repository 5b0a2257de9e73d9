package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/lib/pq"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/migrations"
)

// The one-statement checkpoint write (PostgreSQL). WriteCheckpoint's
// transaction costs six round trips: BEGIN, the session row, the live ref,
// the checkpoint, the event, COMMIT. Its common outcome (a new checkpoint
// at the seq after the last, nothing else changing) fits in one call of
// checkpointd_write_checkpoint (migration 00019), which takes the same
// row lock, checks what the transaction checks, reads what it reads, in
// the same order, and writes what it writes, as one autocommit statement.
// Everything else (the first write of a session on this replica, a seq
// another replica took, a refusal of any kind, a lease lost, a move to
// another ref, a change of validity, a claim taken over) is declined
// before anything is written, and the transaction answers it as before.
// So the one statement never answers anything but a write the transaction
// would have made identically; TestOneStatementWriteMatchesTransaction
// holds the two to the same rows.

const callWriteCheckpoint = `SELECT validity, declined FROM checkpointd_write_checkpoint(
    $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15,
    $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29,
    $30, $31, $32, $33, $34, $35)`

// declinedCode is the SQLSTATE checkpointd_write_checkpoint declines with
// once it has updated the session row; its message says why.
const declinedCode = "CK001"

// writtenSession is what a session's next checkpoint write must know
// before its statement: the repo and role (they never change: the scope
// and binding are checked on them first), the seq it was last seen at (the
// document is sealed for the next one) and the validity its last write
// answered (the answer is rendered with it).
type writtenSession struct {
	repo, role, validity string
	seq                  int64
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

func (w *writtenSessions) forget(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.m, id)
}

func (w *writtenSessions) decline(reason string) {
	n, ok := w.declines.Load(reason)
	if !ok {
		n, _ = w.declines.LoadOrStore(reason, new(atomic.Int64))
	}
	n.(*atomic.Int64).Add(1)
}

// checkpointInput is what WriteCheckpoint derived from the document for
// both ways of writing it.
type checkpointInput struct {
	clearJSON, private         []byte
	pr                         int64
	ws                         checkpointd.Workspace
	head, waitingOn, nextActor string
	seenBefore                 int64
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
	if (w.InScope != nil && !w.InScope(known.repo)) || checkBinding(doc, known.repo, known.role) != nil {
		s.written.decline("binding")
		return false, nil
	}
	// The statement keeps only a validity that stays valid or unverified:
	// a session that was stale, lost a lease or is invalidated at its last
	// write would be updated, then rolled back, on every write.
	if known.validity != string(checkpointd.ValidityValid) && known.validity != string(checkpointd.ValidityUnverified) {
		s.written.decline("validity")
		return false, nil
	}
	seq := known.seq + 1
	// Complete as if every lease the document names were held at its
	// token: the statement declines unless they are.
	ids := make([]string, 0, len(doc.Leases))
	tokens := make([]int64, 0, len(doc.Leases))
	held := make(map[string]int64, len(doc.Leases))
	for _, l := range doc.Leases {
		ids, tokens = append(ids, l.LeaseID), append(tokens, l.FencingToken)
		held[l.LeaseID] = l.FencingToken
	}
	missing := checkpointd.Missing(doc, held)
	if missing == nil {
		missing = []string{}
	}
	complete := len(missing) == 0
	// A failure before the statement is the transaction's to answer: it
	// checks the session row first.
	missingJSON, err := json.Marshal(missing)
	if err != nil {
		return false, nil
	}
	evData, err := checkpointWritten(seq, doc.Stage, complete, missing, w.Digest)
	if err != nil {
		return false, nil
	}
	// What the transaction would answer, if the statement writes.
	answer := *cp
	answer.Seq = seq
	parent := seq - 1
	answer.ParentSeq = &parent
	answer.Complete = complete
	answer.Missing = missing
	var predicted, idemScope, idemKey, idemClaim, idemResponse any
	var idemStatus int
	if idem := w.Idempotency; idem != nil {
		// The response to replay is rendered now, for the validity of the
		// last write; the statement declines if it judges another.
		answer.Validity = checkpointd.Validity(known.validity)
		predicted = known.validity
		body, err := idem.Render(&answer)
		if err != nil {
			return false, nil
		}
		idemScope, idemKey, idemClaim, idemStatus = idem.Scope, idem.Key, idem.Claim, idem.Status
		idemResponse = s.keys.Seal(body, idemAAD(idem.Scope, idem.Key))
	}
	stmt, err := s.prepared(ctx, s.wdb, callWriteCheckpoint)
	if err != nil {
		// No function (a schema older than this binary), the database
		// away: the transaction answers either.
		s.written.decline("error")
		return false, nil
	}
	now := cp.CreatedAt
	var validity, declined sql.NullString
	err = stmt.QueryRowxContext(ctx, w.SessionID, doc.RunID, doc.FencingToken, known.repo, known.role, seq,
		micros(now), in.seenBefore, nullIfZero(in.pr), nullIfZero(in.ws.Branch), nullIfZero(in.ws.Worktree), in.head,
		doc.Stage, in.waitingOn, in.nextActor, pq.Array(ids), pq.Array(tokens), complete, string(missingJSON),
		in.ws.Branch, w.Digest, w.Redactions, string(in.clearJSON), s.keys.Seal(in.private, checkpointAAD(w.SessionID, seq)),
		documentDigest(in.clearJSON), checkpointd.EventCheckpointWritten, string(evData),
		strings.ToLower(known.repo), checkpointd.ReasonNoLiveHead, predicted,
		idemScope, idemKey, idemClaim, idemStatus, idemResponse).Scan(&validity, &declined)
	var pe *pq.Error
	switch {
	case errors.As(err, &pe) && pe.Code == declinedCode:
		// Declined after the session row's update: rolled back whole.
		s.written.decline(pe.Message)
		return false, nil
	case err != nil && retryable(err):
		// A conflict the transaction retries.
		s.written.decline("error")
		return false, nil
	case err != nil:
		s.written.forget(w.SessionID)
		return true, s.classifyOp(OpWrite, err)
	case declined.Valid:
		// What the map knows stays: a wrong seq is declined, never
		// written, and the transaction's answer sets it right.
		s.written.decline(declined.String)
		return false, nil
	}
	answer.Validity = checkpointd.Validity(validity.String)
	*cp = answer
	s.written.taken.Add(1)
	s.written.set(w.SessionID, writtenSession{repo: known.repo, role: known.role, validity: validity.String, seq: seq})
	s.committed()
	return true, nil
}
