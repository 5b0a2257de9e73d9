-- +goose Up
-- The latest checkpoint the drain gate found it could not read back whole
-- (store/drain_readback.go): its seq, or NULL. While it is still the
-- session's latest (unreadable_seq = checkpoint_seq) the session blocks a
-- drain as unknown; its next checkpoint supersedes it.
ALTER TABLE sessions ADD COLUMN unreadable_seq BIGINT;

-- +goose Down
ALTER TABLE sessions DROP COLUMN unreadable_seq;
