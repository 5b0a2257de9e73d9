-- +goose Up
-- The owner part of repo_key, so that a list of an owner's sessions
-- (repo=owner/*, and a token scoped to owner/*) reads an index range in
-- list order, not every session filtered by a prefix. Generated: nothing
-- that writes repo_key (a create, a repository's rename) can forget it.
-- (SQLite adds only a virtual generated column to a table; an index
-- stores its values.)
ALTER TABLE sessions ADD COLUMN repo_owner TEXT GENERATED ALWAYS AS (substr(repo_key, 1, instr(repo_key, '/') - 1)) VIRTUAL;
CREATE INDEX sessions_owner_id ON sessions (repo_owner, id);

-- +goose Down
DROP INDEX sessions_owner_id;
ALTER TABLE sessions DROP COLUMN repo_owner;
