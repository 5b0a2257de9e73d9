package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/checkpointd/checkpointd"
)

// CheckpointWrite is a checkpoint ready to persist: decoded, validated and
// redacted by the caller.
type CheckpointWrite struct {
	SessionID string
	// Doc is the redacted document.
	Doc        *checkpointd.Document
	Digest     string
	Redactions int
	// InScope, when set, must accept the session's repo: the caller's token
	// scope is checked on the row the write locks, without a second read,
	// and before any other answer (a superseded run, a stale fencing token,
	// an ended session): ErrForbidden tells an outsider nothing else.
	InScope func(repo string) bool
	// Idempotency, when set, records the response under a claimed key.
	Idempotency *Idempotency
}

// checkpointInput is what WriteCheckpoint derives from the document once,
// for either way of writing it.
type checkpointInput struct {
	now                        time.Time
	clearJSON, private         []byte
	pr                         int64
	ws                         checkpointd.Workspace
	head, waitingOn, nextActor string
	// seenBefore is the run sighting a write refreshes (SeenRefresh).
	seenBefore int64
}

// WriteCheckpoint appends an immutable checkpoint as the session's next seq,
// with its event, in one transaction. The writer must be the session's
// current run at its fencing token; the write is judged (JudgeWrite) on the
// evidence read under the session's row lock, because completeness depends
// on the leases held at write time. On PostgreSQL the common write is one
// statement (onestatement.go); everything else, and whatever it declines,
// is the transaction (checkpointtx.go).
// Errors: ErrNotFound, ErrForbidden (out of InScope, before any other),
// ErrSessionEnded, ErrRunSuperseded, ErrInvalidCheckpoint (target or role
// not the session's), ErrStoreUnavailable.
func (s *Store) WriteCheckpoint(ctx context.Context, w CheckpointWrite) (*checkpointd.Checkpoint, error) {
	defer s.requestEnded(w.Idempotency)
	if s.keys == nil {
		return nil, errNoKeys
	}
	doc := w.Doc
	in := checkpointInput{now: s.now()}
	if doc.Target != nil {
		in.pr = doc.Target.PR
	}
	if doc.Workspace != nil {
		in.ws = *doc.Workspace
	}
	in.head = strings.ToLower(in.ws.Head)
	if doc.Blocker != nil {
		in.waitingOn = doc.Blocker.WaitingOn
	}
	if doc.NextAction != nil {
		in.nextActor = doc.NextAction.Actor
	}
	in.seenBefore = micros(in.now.Add(-checkpointd.SeenRefresh(s.liveness())))
	var clear checkpointd.Document
	clear, in.private = checkpointd.SplitSealed(*doc)
	var err error
	if in.clearJSON, err = json.Marshal(clear); err != nil {
		return nil, err
	}
	cp := &checkpointd.Checkpoint{Document: *doc, SessionID: w.SessionID, CreatedAt: in.now, Digest: w.Digest, Redactions: w.Redactions}
	if ok, err := s.writeInOneStatement(ctx, w, cp, in); ok {
		if err != nil {
			return nil, err
		}
		return cp, nil
	}
	if err := s.writeInTx(ctx, w, cp, in); err != nil {
		return nil, err
	}
	return cp, nil
}

// errNoKeys fails closed when a store opened without keys is asked to seal
// or unseal.
var errNoKeys = fmt.Errorf("%w: the store has no server keys", checkpointd.ErrKey)

type checkpointRow struct {
	SessionID  string        `db:"session_id"`
	Seq        int64         `db:"seq"`
	ParentSeq  sql.NullInt64 `db:"parent_seq"`
	RunID      string        `db:"run_id"`
	CreatedAt  int64         `db:"created_at"`
	Stage      string        `db:"stage"`
	Branch     string        `db:"branch"`
	Head       string        `db:"head"`
	Digest     string        `db:"digest"`
	Redactions int           `db:"redactions"`
	Complete   bool          `db:"complete"`
	Missing    string        `db:"missing"`
	Document   string        `db:"document"`
	Sealed     string        `db:"sealed"`
	DocDigest  string        `db:"document_digest"`
	Latest     int64         `db:"latest"`
	Validity   string        `db:"validity"`
	Reason     string        `db:"validity_reason"`
}

const selectCheckpoint = `
SELECT c.session_id, c.seq, c.parent_seq, c.run_id, c.created_at, c.stage, c.branch, c.head,
    c.digest, c.redactions, c.complete, c.missing, c.document, c.sealed, c.document_digest,
    s.checkpoint_seq AS latest, s.validity, s.validity_reason
FROM checkpoints c JOIN sessions s ON s.id = c.session_id
WHERE c.session_id = ? AND c.seq = `

// GetCheckpoint returns one checkpoint of a session; seq 0 means the latest.
// Errors: ErrNotFound (no such session, or a seq never written or pruned),
// ErrGone (the session was cleared or pruned), ErrCheckpointCorrupt (it
// cannot be read back whole), ErrStoreUnavailable.
func (s *Store) GetCheckpoint(ctx context.Context, sessionID string, seq int64) (*checkpointd.Checkpoint, error) {
	q, args := selectCheckpoint+"?", []any{sessionID, seq}
	if seq == 0 {
		q, args = selectCheckpoint+"s.checkpoint_seq", []any{sessionID}
	}
	var row checkpointRow
	err := s.rdb.GetContext(ctx, &row, s.rdb.Rebind(q), args...)
	if errors.Is(err, sql.ErrNoRows) {
		if err := s.sessionExists(ctx, sessionID); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("no such checkpoint: %w", checkpointd.ErrNotFound)
	}
	if err != nil {
		return nil, s.classify(err)
	}
	cp := &checkpointd.Checkpoint{SessionID: row.SessionID, Seq: row.Seq, CreatedAt: fromMicros(row.CreatedAt),
		Digest: row.Digest, Redactions: row.Redactions, Complete: row.Complete, Missing: decodeMissing(row.Missing)}
	if row.ParentSeq.Valid {
		cp.ParentSeq = &row.ParentSeq.Int64
	}
	if cp.Document, err = s.readBack(stored{sessionID, row.Seq, row.Document, row.Sealed, row.DocDigest}); err != nil {
		return nil, err
	}
	cp.Validity = checkpointd.ValiditySuperseded
	if row.Seq == row.Latest {
		cp.Validity = checkpointd.Validity(row.Validity)
		cp.ValidityReason = checkpointd.ExplainValidity(cp.Validity, row.Reason)
	}
	return cp, nil
}

const selectCheckpointSummaries = `
SELECT seq, run_id, stage, branch, head, created_at, complete, missing, digest
FROM checkpoints WHERE session_id = ? AND seq < ? ORDER BY seq DESC LIMIT ?`

type summaryRow struct {
	Seq       int64  `db:"seq"`
	RunID     string `db:"run_id"`
	Stage     string `db:"stage"`
	Branch    string `db:"branch"`
	Head      string `db:"head"`
	CreatedAt int64  `db:"created_at"`
	Complete  bool   `db:"complete"`
	Missing   string `db:"missing"`
	Digest    string `db:"digest"`
}

// ListCheckpoints returns summaries of a session's checkpoints with seq <
// before (0: from the newest), newest first. Errors: ErrNotFound,
// ErrStoreUnavailable.
func (s *Store) ListCheckpoints(ctx context.Context, sessionID string, before int64, limit int) ([]checkpointd.CheckpointSummary, error) {
	if err := s.sessionExists(ctx, sessionID); err != nil {
		return nil, err
	}
	if before <= 0 {
		before = 1 << 62
	}
	var rows []summaryRow
	if err := s.rdb.SelectContext(ctx, &rows, s.rdb.Rebind(selectCheckpointSummaries), sessionID, before, limit); err != nil {
		return nil, s.classify(err)
	}
	out := make([]checkpointd.CheckpointSummary, len(rows))
	for i, r := range rows {
		out[i] = checkpointd.CheckpointSummary{Seq: r.Seq, RunID: r.RunID, Stage: r.Stage, Branch: r.Branch, Head: r.Head,
			CreatedAt: fromMicros(r.CreatedAt), Complete: r.Complete, Missing: decodeMissing(r.Missing), Digest: r.Digest}
	}
	return out, nil
}
