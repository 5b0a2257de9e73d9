-- +goose Up
-- Room on each page of sessions for the next version of its rows: every
-- checkpoint write updates its session's row, and an update that changes
-- no indexed column is HOT (no index is written, the old version is
-- pruned in place) only when the new version fits on the same page. At
-- the default (100) a full page sends the write's version elsewhere, with
-- a new entry in each of the table's indexes and a dead tuple for vacuum.
-- Pages written before this keep their fill until rewritten
-- (docs/postgresql.md, "Autovacuum and bloat").
ALTER TABLE sessions SET (fillfactor = 70);

-- +goose Down
ALTER TABLE sessions RESET (fillfactor);
