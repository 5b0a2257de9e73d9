-- +goose Up
-- Drain readiness relative to a drain's start without touching every
-- session at the start (it updated every active row: seconds at 100k, all
-- of them locked meanwhile). Each drain takes the next epoch; each
-- checkpoint write records the epoch it was written in (the latest
-- drain's). A session whose latest checkpoint is older than the running
-- drain's epoch blocks it though drain_ready still says true: the store
-- counts and lists those through sessions_written_before (store/drain.go),
-- and a background pass resets their drain_ready in batches, after which
-- they are found through sessions_drain_blocking as before. Drains before
-- this migration keep epoch 0: their start reset the sessions already.
ALTER TABLE drains ADD COLUMN epoch BIGINT NOT NULL DEFAULT 0;
CREATE INDEX drains_epoch ON drains (epoch);
ALTER TABLE sessions ADD COLUMN checkpoint_epoch BIGINT NOT NULL DEFAULT 0;
-- The sessions with a run that say drain_ready, by the epoch of their
-- latest checkpoint: the range before the running drain's epoch is what the
-- reset pass resets, and its valid part what blocks the drain outside
-- sessions_drain_blocking (validity in the key: counted from the index
-- alone). A write changes checkpoint_epoch once per drain at most, so its
-- update stays HOT on PostgreSQL.
CREATE INDEX sessions_written_before ON sessions (checkpoint_epoch, validity, id)
    WHERE state = 'active' AND drain_ready AND current_run_id <> '';

-- +goose Down
DROP INDEX sessions_written_before;
ALTER TABLE sessions DROP COLUMN checkpoint_epoch;
DROP INDEX drains_epoch;
ALTER TABLE drains DROP COLUMN epoch;
