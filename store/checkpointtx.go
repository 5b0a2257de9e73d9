package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/migrations"
)

// The checkpoint write as a transaction: every write on SQLite, and on
// PostgreSQL whatever the one statement (onestatement.go) declines. It
// loads the evidence under the session's row lock, has JudgeWrite judge
// it, and persists the judgement.

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
    write_failed_code = '',
    checkpoint_epoch = (SELECT COALESCE(MAX(epoch), 0) FROM drains)
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

// writeInTx writes w in a transaction of its own and fills cp with what
// it recorded.
func (s *Store) writeInTx(ctx context.Context, w CheckpointWrite, cp *checkpointd.Checkpoint, in checkpointInput) error {
	doc, now := w.Doc, in.now
	// "Not said" is NULL, so COALESCE keeps what the row has.
	pr, branch, worktree := nullIfZero(in.pr), nullIfZero(in.ws.Branch), nullIfZero(in.ws.Worktree)
	hot, err := s.checkpointStatements(ctx)
	if err != nil {
		return s.classify(err)
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
		err := tx.StmtxContext(ctx, hot.advance).QueryRowxContext(ctx, micros(now), micros(now), pr, branch,
			worktree, in.head, doc.Stage, in.waitingOn, in.nextActor, in.seenBefore, micros(now), w.SessionID, doc.RunID, doc.FencingToken).Scan(&seq, &eseq, &repo, &role,
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
			moved = append(moved, checkpointd.RefKey(boundBranch, 0))
		}
		if was.pr.Valid && was.pr.Int64 != boundPR && boundPR > 0 {
			moved = append(moved, checkpointd.RefKey("", boundPR))
		}
		if err := holdRefs(ctx, tx, strings.ToLower(repo), moved, now); err != nil {
			return err
		}
		live, liveVersion, err := liveRef(ctx, tx, tx.StmtxContext(ctx, hot.liveRefs), repo, boundBranch, boundPR)
		if err != nil {
			return err
		}
		j, err := checkpointd.JudgeWrite(checkpointd.WriteEvidence{Doc: doc, Repo: repo, Role: role, Held: held, Current: current, Live: live})
		if err != nil {
			return err
		}
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
		// The response to replay is stored with the write; a claim taken
		// over meanwhile rolls the write back.
		if err := s.complete(ctx, tx, w.Idempotency, cp); err != nil {
			return err
		}
		evData, err := checkpointWritten(seq, doc.Stage, cp.Complete, cp.Missing, w.Digest)
		if err != nil {
			return err
		}
		if _, err := tx.StmtxContext(ctx, hot.insertCheckpoint).ExecContext(ctx, w.SessionID, seq, cp.ParentSeq, doc.RunID,
			doc.FencingToken, micros(now), doc.Stage, in.ws.Branch, in.head, w.Digest, w.Redactions, cp.Complete,
			string(missingJSON), string(in.clearJSON), s.keys.Seal(in.private, CheckpointAAD(w.SessionID, seq)), documentDigest(in.clearJSON)); err != nil {
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
		return nil
	})
	if err != nil {
		return err
	}
	if s.dialect == migrations.Postgres {
		s.written.set(w.SessionID, written)
	}
	return nil
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

// nullIfZero turns "not said" into NULL so COALESCE keeps the old value.
func nullIfZero[T comparable](v T) any {
	var zero T
	if v == zero {
		return nil
	}
	return v
}

// CheckpointAAD binds a sealed value to its checkpoint row. Exported for
// scripts/scale, which seals each cloned checkpoint for its own row.
func CheckpointAAD(sessionID string, seq int64) []byte {
	return fmt.Appendf(nil, "checkpoint\x00%s\x00%d", sessionID, seq)
}
