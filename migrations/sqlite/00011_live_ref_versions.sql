-- +goose Up
-- A delivery commits the ref's new live state and answers; the validity of
-- the sessions bound to the ref is brought in line (settled) right after, in
-- its own transaction (store/settle.go). version counts the observations
-- that changed the ref; settled_version is the one its sessions were last
-- judged against. Reads that report validity settle first, so nothing ever
-- reads a verdict older than the live refs.
ALTER TABLE live_refs ADD COLUMN version BIGINT NOT NULL DEFAULT 0;
ALTER TABLE live_refs ADD COLUMN settled_version BIGINT NOT NULL DEFAULT 0;
CREATE INDEX live_refs_unsettled ON live_refs (repo_key, ref) WHERE version <> settled_version;

-- +goose Down
DROP INDEX live_refs_unsettled;
ALTER TABLE live_refs DROP COLUMN settled_version;
ALTER TABLE live_refs DROP COLUMN version;
