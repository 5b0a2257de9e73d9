-- +goose Up
-- The owner part of repo_key, so that a list of an owner's sessions
-- (repo=owner/*, and a token scoped to owner/*) reads an index range in
-- list order, not every session filtered by a prefix. Generated: nothing
-- that writes repo_key (a create, a repository's rename) can forget it.
ALTER TABLE sessions ADD COLUMN repo_owner TEXT GENERATED ALWAYS AS (split_part(repo_key, '/', 1)) STORED;
CREATE INDEX sessions_owner_id ON sessions (repo_owner, id);

-- +goose Down
DROP INDEX sessions_owner_id;
ALTER TABLE sessions DROP COLUMN repo_owner;
