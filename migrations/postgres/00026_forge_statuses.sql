-- +goose Up
-- The commit statuses the daemon last set on the forge (--forge-status,
-- DESIGN §17), one per commit of a repository: what makes an update that
-- changes nothing cost no call, across restarts and replicas. A row is
-- written after the forge took the status.
CREATE TABLE forge_statuses (
    repo_key    TEXT NOT NULL,
    sha         TEXT NOT NULL,
    state       TEXT NOT NULL,
    description TEXT NOT NULL,
    target_url  TEXT NOT NULL,
    posted_at   BIGINT NOT NULL,
    PRIMARY KEY (repo_key, sha)
);
CREATE INDEX forge_statuses_posted ON forge_statuses (posted_at);

-- +goose Down
DROP TABLE forge_statuses;
