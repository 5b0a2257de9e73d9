-- +goose Up
-- PostgreSQL's feed wake-up moved out of the writing transaction; SQLite's
-- is in process and never used a trigger. The file keeps the two folders in
-- step.
SELECT 1;

-- +goose Down
SELECT 1;
