-- +goose Up
-- The reports of the latest reconcile passes, newest by id (ids are time
-- ordered). GET /v1/reconcile/last reads the newest; the store keeps a
-- bounded number, so growth is by policy.
CREATE TABLE reconcile_reports (
    id          TEXT PRIMARY KEY, -- the pass id: validity events cite reconcile:<id>
    finished_at BIGINT NOT NULL,
    report      TEXT NOT NULL    -- the JSON report as the API serves it
);

-- The forge repository id behind each repo name sessions use, learned from
-- forge answers and from webhook deliveries (forge_repos). forge_repos keeps
-- only the latest name of an id, so without this memory a rename seen in a
-- webhook would erase the link between the old name and the id.
CREATE TABLE repo_ids (
    repo_key TEXT PRIMARY KEY, -- lower(owner/name) as sessions name the repo
    repo_id  BIGINT NOT NULL,
    seen_at  BIGINT NOT NULL
);
CREATE INDEX repo_ids_repo_id ON repo_ids (repo_id);

-- +goose Down
SELECT 1;
