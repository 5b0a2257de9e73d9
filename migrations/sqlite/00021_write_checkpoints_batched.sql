-- +goose Up
-- PostgreSQL's batched one-statement write; SQLite writes in one
-- transaction per checkpoint. The file keeps the two folders in step.
SELECT 1;

-- +goose Down
SELECT 1;
