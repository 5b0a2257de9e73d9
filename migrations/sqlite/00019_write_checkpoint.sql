-- +goose Up
-- PostgreSQL's one-statement checkpoint write (a PL/pgSQL function) has no
-- SQLite counterpart: SQLite's single writer commits queued writes together
-- instead (store/write.go). The file keeps the two folders in step.
SELECT 1;

-- +goose Down
SELECT 1;
