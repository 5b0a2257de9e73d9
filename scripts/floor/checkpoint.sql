-- pgbench script: the transaction of store.WriteCheckpoint, statement for
-- statement (store/checkpoints.go advanceSession, insertCheckpoint, and
-- store/events.go insertEventSQL), with the same client round trip between
-- statements: the seqs the UPDATE returns feed the INSERTs. Each pgbench
-- client writes to its own session (ids 1..clients), as each agent does.
-- Variables other than sid/cseq/eseq/pseq come from postgres.sh (-D).
\set sid :client_id + 1
BEGIN;
UPDATE sessions SET
    checkpoint_seq = checkpoint_seq + 1,
    event_seq = event_seq + 1,
    updated_at = :now,
    pr = COALESCE(:pr, pr),
    branch = COALESCE(:branch, branch),
    worktree = COALESCE(:worktree, worktree),
    head = :head
WHERE id = :sid AND state = 'active' AND current_run_id = :sid AND run_seq = 1
RETURNING checkpoint_seq AS cseq, event_seq AS eseq, repo, role, validity \gset
\set pseq :cseq - 1
INSERT INTO checkpoints (session_id, seq, parent_seq, run_id, fencing_token, created_at, stage,
    branch, head, digest, redactions, complete, missing, document, sealed)
VALUES (:sid, :cseq, NULLIF(:pseq, 0), :sid, 1, :now, :stage, :branch, :head, :digest, 0, :complete, :missing, :doc, '');
INSERT INTO events (session_id, seq, at, kind, run_id, data) VALUES (:sid, :eseq, :now, 'checkpoint.written', :sid, :evdata);
COMMIT;
