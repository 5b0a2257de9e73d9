-- +goose Up
-- The last observed head of a branch or PR, with when and from where
-- (webhook:<delivery id> or reconcile:<pass id>). state says whether the
-- ref is open, or a PR closed/merged, or a branch deleted.
CREATE TABLE live_refs (
    repo_key    TEXT NOT NULL,
    ref         TEXT NOT NULL, -- branch:<name> or pr:<number>
    head        TEXT NOT NULL DEFAULT '',
    state       TEXT NOT NULL DEFAULT 'open',
    observed_at BIGINT NOT NULL,
    source      TEXT NOT NULL,
    PRIMARY KEY (repo_key, ref)
);

-- Every received webhook by delivery id: a delivery and its effects commit
-- together, so the same id twice has no second effect.
CREATE TABLE deliveries (
    id          TEXT PRIMARY KEY,
    event       TEXT NOT NULL,
    forge       TEXT NOT NULL,
    repo_key    TEXT NOT NULL DEFAULT '',
    received_at BIGINT NOT NULL,
    effects     TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX deliveries_received ON deliveries (received_at);

-- Forge repository ids by name: renames and transfers send no webhook, so
-- a known id under a new name is how a rename shows.
CREATE TABLE forge_repos (
    repo_id   BIGINT PRIMARY KEY,
    full_name TEXT NOT NULL,
    seen_at   BIGINT NOT NULL
);

-- Webhook fan-out finds the active sessions of a branch or PR by index.
CREATE INDEX sessions_active_branch ON sessions (repo_key, branch) WHERE state = 'active';
CREATE INDEX sessions_active_pr ON sessions (repo_key, pr) WHERE state = 'active';

-- +goose Down
SELECT 1;
