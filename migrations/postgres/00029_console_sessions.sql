-- +goose Up
-- Console sessions live in the database so that any replica serves them
-- (no sticky routing), by digests: id_digest is the SHA-256 of the
-- cookie's value and token_hash the hash api_tokens keys on, never the
-- cookie nor the token. forge_grant is the forge's OAuth token of a
-- person signed in with the forge, sealed with the server key.
CREATE TABLE console_sessions (
    id_digest        TEXT PRIMARY KEY,
    token_hash       TEXT NOT NULL,
    token_id         TEXT NOT NULL,
    name             TEXT NOT NULL,
    role             TEXT NOT NULL,
    scopes           TEXT NOT NULL DEFAULT '[]',
    created_at       BIGINT NOT NULL,
    last_seen_at     BIGINT NOT NULL,
    forge_login      TEXT,
    forge_grant      TEXT,
    forge_checked_at BIGINT
);
-- The sweep of idle sessions.
CREATE INDEX console_sessions_seen ON console_sessions (last_seen_at);

-- The sign-ins with the forge under way: the state's digest and the PKCE
-- verifier (sealed), taken once by whichever replica the forge's callback
-- reaches.
CREATE TABLE console_oauth_flows (
    state_digest TEXT PRIMARY KEY,
    verifier     TEXT NOT NULL,
    started_at   BIGINT NOT NULL
);
CREATE INDEX console_oauth_flows_started ON console_oauth_flows (started_at);

-- +goose Down
DROP TABLE console_oauth_flows;
DROP TABLE console_sessions;
