-- +goose Up
-- Which process incarnation holds an Idempotency-Key claim (store/claims.go):
-- a claim whose owner is gone (a crashed replica, a previous process on
-- SQLite) no longer blocks its retry. '' for claims made before: they are
-- taken over after the claim TTL, as they always were.
ALTER TABLE idempotency ADD COLUMN owner TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE idempotency DROP COLUMN owner;
