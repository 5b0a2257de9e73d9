-- pgbench script: the daemon's own one-statement write
-- (checkpointd_write_checkpoint, migration 00025) with the floor's
-- document whole in the document column, at the seq each client counts
-- itself (one session per client, as the daemon's load test has). What
-- the daemon's statement costs PostgreSQL, beside the CTE's ceiling: the
-- checks, the live-ref read and PL/pgSQL.
\set sid :client_id + 1
\set seq :seq + 1
SELECT validity, declined FROM checkpointd_write_checkpoint(:sid, :sid, 1, 'acme/widgets', 'author', :seq,
    :now, 0, :pr, :branch, :worktree, :head, :stage, '', '', '{}', '{}', :complete, :missing,
    :branch, :digest, 0, :doc, '', '', 'checkpoint.written', :evdata, 'acme/widgets',
    'unverified', :noliveref, '', 0, NULL, NULL, NULL, 0, NULL);
