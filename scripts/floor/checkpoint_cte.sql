-- pgbench script: the same write as checkpoint.sql in ONE round trip, as a
-- data-modifying CTE in an implicit transaction (no BEGIN/COMMIT trips).
-- The event data is built in SQL because the seq is only known inside the
-- statement. This is the ceiling a one-statement WriteCheckpoint could reach.
\set sid :client_id + 1
WITH s AS (
    UPDATE sessions SET
        checkpoint_seq = checkpoint_seq + 1,
        event_seq = event_seq + 1,
        updated_at = :now,
        pr = COALESCE(:pr, pr),
        branch = COALESCE(:branch, branch),
        worktree = COALESCE(:worktree, worktree),
        head = :head
    WHERE id = :sid AND state = 'active' AND current_run_id = :sid AND run_seq = 1
    RETURNING id, current_run_id, checkpoint_seq, event_seq
), c AS (
    INSERT INTO checkpoints (session_id, seq, parent_seq, run_id, fencing_token, created_at, stage,
        branch, head, digest, redactions, complete, missing, document, sealed)
    SELECT s.id, s.checkpoint_seq, NULLIF(s.checkpoint_seq - 1, 0), s.current_run_id, 1, :now::bigint,
        :stage::text, :branch::text, :head::text, :digest::text, 0, :complete::boolean, :missing::text, :doc::text, ''
    FROM s
)
INSERT INTO events (session_id, seq, at, kind, run_id, data)
SELECT s.id, s.event_seq, :now::bigint, 'checkpoint.written', s.current_run_id,
    '{"seq":' || s.checkpoint_seq || :evtail::text
FROM s;
