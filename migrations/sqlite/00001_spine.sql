-- +goose Up
-- Times are Unix microseconds from the daemon's injected clock, so the SQL is
-- the same on both engines and tests control time.
CREATE TABLE sessions (
    id              TEXT PRIMARY KEY,
    repo            TEXT NOT NULL,
    repo_key        TEXT NOT NULL, -- lower(repo): forge names match case-insensitively
    role            TEXT NOT NULL,
    issue           BIGINT NOT NULL DEFAULT 0,
    pr              BIGINT NOT NULL DEFAULT 0,
    branch          TEXT NOT NULL DEFAULT '',
    worktree        TEXT NOT NULL DEFAULT '',
    capabilities    TEXT NOT NULL DEFAULT '[]',
    state           TEXT NOT NULL,
    outcome         TEXT NOT NULL DEFAULT '',
    created_by      TEXT NOT NULL DEFAULT '',
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL,
    ended_at        BIGINT,
    current_run_id  TEXT NOT NULL,
    run_seq         BIGINT NOT NULL, -- fencing token of the current run
    checkpoint_seq  BIGINT NOT NULL DEFAULT 0,
    event_seq       BIGINT NOT NULL DEFAULT 0,
    head            TEXT NOT NULL DEFAULT '',
    validity        TEXT NOT NULL DEFAULT 'unverified',
    validity_reason TEXT NOT NULL DEFAULT '',
    validity_at     BIGINT NOT NULL
);
CREATE INDEX sessions_state_id ON sessions (state, id);
CREATE INDEX sessions_repo_id ON sessions (repo_key, id);

CREATE TABLE runs (
    id              TEXT PRIMARY KEY,
    session_id      TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    fencing_token   BIGINT NOT NULL,
    agent           TEXT NOT NULL,
    started_at      BIGINT NOT NULL,
    takeover_reason TEXT NOT NULL DEFAULT '',
    superseded_at   BIGINT,
    superseded_by   TEXT NOT NULL DEFAULT '',
    UNIQUE (session_id, fencing_token)
);

CREATE TABLE checkpoints (
    session_id    TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq           BIGINT NOT NULL,
    parent_seq    BIGINT,
    run_id        TEXT NOT NULL,
    fencing_token BIGINT NOT NULL,
    created_at    BIGINT NOT NULL,
    stage         TEXT NOT NULL DEFAULT '',
    branch        TEXT NOT NULL DEFAULT '',
    head          TEXT NOT NULL DEFAULT '',
    digest        TEXT NOT NULL,
    redactions    INTEGER NOT NULL DEFAULT 0,
    complete      BOOLEAN NOT NULL,
    missing       TEXT NOT NULL DEFAULT '[]',
    document      TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);

CREATE TABLE events (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq        BIGINT NOT NULL,
    at         BIGINT NOT NULL,
    kind       TEXT NOT NULL,
    run_id     TEXT NOT NULL DEFAULT '',
    data       TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (session_id, seq)
);

CREATE TABLE api_tokens (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    role       TEXT NOT NULL,
    scopes     TEXT NOT NULL DEFAULT '[]',
    hash       TEXT NOT NULL UNIQUE, -- sha256 of the token; the token itself is never stored
    created_at BIGINT NOT NULL,
    revoked_at BIGINT
);

-- Daemon-wide facts, e.g. the fingerprint of the key the data was written
-- with, so a daemon started with another key refuses instead of writing
-- digests nobody can compare.
CREATE TABLE settings (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- +goose Down
-- Forward-only: there is no way back that keeps the data.
SELECT 1;
