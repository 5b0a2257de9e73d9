-- +goose Up
-- Whether every lease the session's latest checkpoint names is held by its
-- run: kept on the row so every judge of validity (webhooks, reconcile,
-- lease expiry, checkpoint writes) sees the lease half of the evidence.
ALTER TABLE sessions ADD COLUMN leases_ok BOOLEAN NOT NULL DEFAULT TRUE;

-- One row per resource ever leased: the fencing counter (never reset, so
-- tokens only grow across expiry, release, takeover and restarts) and the
-- grant in force. Acquiring is one conditional upsert on this row.
CREATE TABLE lease_resources (
    resource_key  TEXT PRIMARY KEY,
    fencing_token BIGINT NOT NULL,
    lease_id      TEXT NOT NULL DEFAULT '', -- the held grant; '' when free
    expires_at    BIGINT NOT NULL DEFAULT 0
);

-- Every grant, held or ended.
CREATE TABLE leases (
    id            TEXT PRIMARY KEY,
    resource_key  TEXT NOT NULL,
    kind          TEXT NOT NULL,
    repo          TEXT NOT NULL,
    repo_key      TEXT NOT NULL,
    number        BIGINT NOT NULL DEFAULT 0,
    branch        TEXT NOT NULL DEFAULT '',
    session_id    TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    run_id        TEXT NOT NULL,
    fencing_token BIGINT NOT NULL,
    state         TEXT NOT NULL,
    acquired_at   BIGINT NOT NULL,
    expires_at    BIGINT NOT NULL,
    ended_at      BIGINT
);
CREATE INDEX leases_session ON leases (session_id, state);
CREATE INDEX leases_run ON leases (run_id, state);
CREATE INDEX leases_repo ON leases (repo_key, id);
CREATE INDEX leases_resource ON leases (resource_key, id);
CREATE INDEX leases_held_expiry ON leases (expires_at) WHERE state = 'held';

-- +goose Down
SELECT 1;
