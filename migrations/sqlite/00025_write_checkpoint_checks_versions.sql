-- +goose Up
-- PostgreSQL's one-statement checkpoint write has no SQLite counterpart
-- (00019); the file keeps the two folders in step.
SELECT 1;

-- +goose Down
SELECT 1;
