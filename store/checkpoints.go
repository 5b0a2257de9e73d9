package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/migrations"
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

// advanceSession claims the next checkpoint and event seqs and moves the
// session's binding (PR, branch, head) to what the checkpoint says, but only
// for the session's current run at its fencing token: the row lock this
// takes serialises concurrent writers of one session. A successful write
// clears a recorded write failure (drain gate). The same statement keeps
// the fleet columns (stage, waiting_on, next_actor: what lists filter by;
// the last two are sealed in the document, so the row keeps a clear copy)
// and records the run's sighting, but moves run_seen_at only when it lags
// by more than checkpointd.SeenRefresh: the liveness index on it then
// changes at most once per refresh per session, and an ordinary write
// changes no indexed column (a HOT update on PostgreSQL). No extra
// statement on the write path.
const (
	advanceSessionSet = `
UPDATE sessions SET
    checkpoint_seq = checkpoint_seq + 1,
    event_seq = event_seq + 1,
    updated_at = ?,
    checkpoint_at = ?,
    pr = COALESCE(?, pr),
    branch = COALESCE(?, branch),
    worktree = COALESCE(?, worktree),
    head = ?,
    stage = ?,
    waiting_on = ?,
    next_actor = ?,
    run_seen_at = CASE WHEN run_seen_at < ? THEN ? ELSE run_seen_at END,
    write_failed_at = NULL,
    write_failed_code = ''
`
	advanceSessionGuard = ` AND state = 'active' AND current_run_id = ? AND current_run_id <> '' AND run_seq = ?
RETURNING checkpoint_seq, event_seq, repo, role, validity, validity_reason, leases_ok, branch, pr, latest_complete, latest_missing, drain_ready,
    `
	advanceSession = advanceSessionSet + `WHERE id = ?` + advanceSessionGuard + `NULL AS old_branch, NULL AS old_pr`
	// advanceSessionPG is advanceSession that also returns the binding
	// before the write (the locked row's, read by the FROM): on PostgreSQL
	// a write that moves its session to another ref must read that ref's
	// live state with a lock (WriteCheckpoint).
	advanceSessionPG = advanceSessionSet +
		`FROM (SELECT id AS old_id, branch AS old_branch, pr AS old_pr FROM sessions WHERE id = ? FOR UPDATE) o
WHERE sessions.id = o.old_id` + advanceSessionGuard + `o.old_branch, o.old_pr`
)

// setReadiness keeps what the drain gate needs on the session row; a
// checkpoint written while a drain runs makes the session ready for it when
// complete.
const setReadiness = `UPDATE sessions SET leases_ok = ?, latest_complete = ?, latest_missing = ?, drain_ready = ? WHERE id = ?`

const insertCheckpoint = `
INSERT INTO checkpoints (session_id, seq, parent_seq, run_id, fencing_token, created_at, stage,
    branch, head, digest, redactions, complete, missing, document, sealed, document_digest)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// WriteCheckpoint appends an immutable checkpoint as the session's next seq,
// with its event, in one transaction. The writer must be the session's
// current run at its fencing token; completeness is judged here, inside the
// transaction, because it depends on the leases held at write time.
// Errors: ErrNotFound, ErrForbidden (out of InScope, before any other),
// ErrSessionEnded, ErrRunSuperseded, ErrInvalidCheckpoint (target or role
// not the session's), ErrStoreUnavailable.
func (s *Store) WriteCheckpoint(ctx context.Context, w CheckpointWrite) (*checkpointd.Checkpoint, error) {
	defer s.requestEnded(w.Idempotency)
	if s.keys == nil {
		return nil, errNoKeys
	}
	now := s.now()
	doc := w.Doc
	clear, private := checkpointd.SplitSealed(*doc)
	clearJSON, err := json.Marshal(clear)
	if err != nil {
		return nil, err
	}
	var pr int64
	if doc.Target != nil {
		pr = doc.Target.PR
	}
	var ws checkpointd.Workspace
	if doc.Workspace != nil {
		ws = *doc.Workspace
	}
	head := strings.ToLower(ws.Head)
	waitingOn, nextActor := fleetNames(doc)
	seenBefore := micros(now.Add(-checkpointd.SeenRefresh(s.liveness())))
	cp := &checkpointd.Checkpoint{Document: *doc, SessionID: w.SessionID, CreatedAt: now, Digest: w.Digest, Redactions: w.Redactions}
	if ok, err := s.writeInOneStatement(ctx, w, cp, checkpointInput{clearJSON: clearJSON, private: private, pr: pr, ws: ws,
		head: head, waitingOn: waitingOn, nextActor: nextActor, seenBefore: seenBefore}); ok {
		if err != nil {
			return nil, err
		}
		return cp, nil
	}
	hot, err := s.checkpointStatements(ctx)
	if err != nil {
		return nil, s.classify(err)
	}
	var written writtenSession
	err = s.change(ctx, CauseCheckpoint, func(ctx context.Context, tx *sqlx.Tx, ch *changes) error {
		var seq, eseq int64
		var repo, role string
		var current checkpointd.Verdict
		var leasesOK bool
		var boundBranch string
		var boundPR int64
		var was struct {
			complete, ready bool
			missing         string
			branch          sql.NullString
			pr              sql.NullInt64
		}
		err := tx.StmtxContext(ctx, hot.advance).QueryRowxContext(ctx, micros(now), micros(now), nullIfZero(pr), nullIfZero(ws.Branch),
			nullIfZero(ws.Worktree), head, doc.Stage, waitingOn, nextActor, seenBefore, micros(now), w.SessionID, doc.RunID, doc.FencingToken).Scan(&seq, &eseq, &repo, &role,
			&current.Validity, &current.Reason, &leasesOK, &boundBranch, &boundPR, &was.complete, &was.missing, &was.ready, &was.branch, &was.pr)
		if errors.Is(err, sql.ErrNoRows) {
			return s.refusedRun(ctx, tx, w.SessionID, doc.RunID, doc.FencingToken, w.InScope)
		}
		if err != nil {
			return err
		}
		// Scope before everything else the write may answer (binding,
		// completeness); the transaction rolls the advance back.
		if w.InScope != nil && !w.InScope(repo) {
			return checkpointd.OutOfScope()
		}
		if err := checkBinding(doc, repo, role); err != nil {
			return err
		}
		// The evidence, read under the row lock the advance took.
		var held map[string]int64
		if len(doc.Leases) > 0 {
			if held, err = heldByRun(ctx, tx, doc.RunID, now); err != nil {
				return err
			}
		}
		// A settle of a ref the session was bound to locks the session, so
		// it waits for this write. A ref the session moves to has no settle
		// that knows the session before the commit: hold its row first, so
		// a delivery to it waits for this write and its settle sees the
		// session (PostgreSQL; advanceSessionPG says what moved).
		var moved []string
		if was.branch.Valid && was.branch.String != boundBranch && boundBranch != "" {
			moved = append(moved, "branch:"+boundBranch)
		}
		if was.pr.Valid && was.pr.Int64 != boundPR && boundPR > 0 {
			moved = append(moved, "pr:"+strconv.FormatInt(boundPR, 10))
		}
		if err := holdRefs(ctx, tx, strings.ToLower(repo), moved, now); err != nil {
			return err
		}
		live, liveVersion, err := liveRef(ctx, tx, tx.StmtxContext(ctx, hot.liveRefs), repo, boundBranch, boundPR)
		if err != nil {
			return err
		}
		j := checkpointd.JudgeWrite(checkpointd.WriteEvidence{Doc: doc, Held: held, Current: current, Live: live})
		cp.Missing, cp.Complete, cp.Validity = j.Missing, j.Complete, j.Validity
		// Readiness for a drain (drain.go) lives on the row, written only
		// when it changes: an agent writing complete checkpoints pays no
		// extra statement.
		missingJSON, _ := json.Marshal(j.Missing)
		if j.LeasesHeld != leasesOK || j.Complete != was.complete || j.DrainReady != was.ready || string(missingJSON) != was.missing {
			if _, err := tx.ExecContext(ctx, tx.Rebind(setReadiness), j.LeasesHeld, j.Complete, string(missingJSON), j.DrainReady, w.SessionID); err != nil {
				return err
			}
		}
		cp.Seq = seq
		if seq > 1 {
			parent := seq - 1
			cp.ParentSeq = &parent
		}
		if _, err := tx.StmtxContext(ctx, hot.insertCheckpoint).ExecContext(ctx, w.SessionID, seq, cp.ParentSeq, doc.RunID,
			doc.FencingToken, micros(now), doc.Stage, ws.Branch, head, w.Digest, w.Redactions, cp.Complete,
			string(missingJSON), string(clearJSON), s.keys.Seal(private, checkpointAAD(w.SessionID, seq)), documentDigest(clearJSON)); err != nil {
			return err
		}
		evData, err := checkpointWritten(seq, doc.Stage, cp.Complete, cp.Missing, w.Digest)
		if err != nil {
			return err
		}
		if _, err := tx.StmtxContext(ctx, hot.insertEvent).ExecContext(ctx, w.SessionID, eseq, micros(now),
			checkpointd.EventCheckpointWritten, doc.RunID, string(evData)); err != nil {
			return err
		}
		if j.Changed {
			if err := recordVerdict(ctx, tx, ch, w.SessionID, now, current, j.Verdict, map[string]any{"checkpoint_seq": seq}); err != nil {
				return err
			}
		}
		written = writtenSession{repo: repo, role: role, seq: seq, verdict: j.Verdict, live: live, liveVersion: liveVersion}
		return s.complete(ctx, tx, w.Idempotency, cp)
	})
	if err != nil {
		return nil, err
	}
	if s.dialect == migrations.Postgres {
		s.written.set(w.SessionID, written)
	}
	return cp, nil
}

// checkpointWritten is the data of a checkpoint.written event, the same
// from the transaction and from the one statement.
func checkpointWritten(seq int64, stage string, complete bool, missing []string, digest string) ([]byte, error) {
	return json.Marshal(map[string]any{"seq": seq, "stage": stage, "complete": complete, "missing": missing, "digest": digest})
}

// checkpointStatements are the statements every checkpoint write runs.
type checkpointStatements struct {
	advance, liveRefs, insertCheckpoint, insertEvent *sqlx.Stmt
}

func (s *Store) checkpointStatements(ctx context.Context) (*checkpointStatements, error) {
	var h checkpointStatements
	for _, p := range []struct {
		dst   **sqlx.Stmt
		query string
	}{{&h.advance, s.dialectSQL(advanceSession, advanceSessionPG)}, {&h.liveRefs, selectLiveRefs}, {&h.insertCheckpoint, insertCheckpoint}, {&h.insertEvent, insertEventSQL}} {
		st, err := s.prepared(ctx, s.wdb, p.query)
		if err != nil {
			return nil, err
		}
		*p.dst = st
	}
	return &h, nil
}

// fleetNames are the latest checkpoint's blocker.waiting_on and
// next_action.actor, kept in the clear on the session row. Validation
// capped them (schema: names of at most 64 bytes) and redaction ran.
func fleetNames(doc *checkpointd.Document) (waitingOn, nextActor string) {
	if doc.Blocker != nil {
		waitingOn = doc.Blocker.WaitingOn
	}
	if doc.NextAction != nil {
		nextActor = doc.NextAction.Actor
	}
	return waitingOn, nextActor
}

// nullIfZero turns "not said" into NULL so COALESCE keeps the old value.
func nullIfZero[T comparable](v T) any {
	var zero T
	if v == zero {
		return nil
	}
	return v
}

// errNoKeys fails closed when a store opened without keys is asked to seal
// or unseal.
var errNoKeys = fmt.Errorf("%w: the store has no server keys", checkpointd.ErrKey)

// checkpointAAD binds a sealed value to its checkpoint row.
func checkpointAAD(sessionID string, seq int64) []byte {
	return fmt.Appendf(nil, "checkpoint\x00%s\x00%d", sessionID, seq)
}

// checkBinding rejects a checkpoint about another repo or role than its
// session's: a session is bound to one target and one role.
func checkBinding(doc *checkpointd.Document, repo, role string) error {
	var problems []checkpointd.Problem
	if doc.Target != nil && !strings.EqualFold(doc.Target.Repo, repo) {
		problems = append(problems, checkpointd.Problem{Path: "/target/repo",
			Message: fmt.Sprintf("repo %q is not the session's repo %q", doc.Target.Repo, repo)})
	}
	if doc.Role != role {
		problems = append(problems, checkpointd.Problem{Path: "/role",
			Message: fmt.Sprintf("role %q is not the session's role %q", doc.Role, role)})
	}
	if problems != nil {
		return &checkpointd.ValidationError{Kind: checkpointd.ErrInvalidCheckpoint, Problems: problems}
	}
	return nil
}

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
