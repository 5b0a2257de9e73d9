-- +goose Up
-- Whether the drain decision last recorded in the session's log found it
-- ready (store/drain_notes.go): a decision is noted again in a session's
-- log only when what it says about that session changed.
ALTER TABLE sessions ADD COLUMN drain_noted_ready BOOLEAN NOT NULL DEFAULT FALSE;

-- +goose Down
ALTER TABLE sessions DROP COLUMN drain_noted_ready;
