-- +goose Up
-- PostgreSQL's sessions get room on each page for HOT updates (its
-- 00034); SQLite updates a row in place and has no such setting. The
-- migration is here so both dialects have the same versions.
SELECT 1;

-- +goose Down
SELECT 1;
