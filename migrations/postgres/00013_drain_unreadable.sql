-- +goose Up
-- The drain gate vouches only for a latest checkpoint it can read back
-- whole (store/drain_readback.go).
--   checkpoints.document_digest  sha256 of the stored clear document, written
--                                with it: the gate checks the bytes are those
--                                written without parsing them ('' for
--                                checkpoints written before: parsed instead)
--   sessions.unreadable_seq      the latest checkpoint a completion could not
--                                read back, or NULL; while it is still the
--                                session's latest (= checkpoint_seq) the
--                                session blocks a drain as unknown
ALTER TABLE checkpoints ADD COLUMN document_digest TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN unreadable_seq BIGINT;

-- +goose Down
ALTER TABLE sessions DROP COLUMN unreadable_seq;
ALTER TABLE checkpoints DROP COLUMN document_digest;
