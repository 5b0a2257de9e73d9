-- +goose Up
-- The fleet in one read (DESIGN §6): what an operator lists and filters
-- sessions by, kept on the session row.
--   stage       the latest checkpoint's stage ('' before the first)
--   waiting_on  its blocker.waiting_on, and
--   next_actor  its next_action.actor: both live in the sealed part of the
--               document (blocker is sealed whole), so the row keeps a clear
--               copy for listing and filtering. They are short redacted
--               names (the schema caps them at 64 bytes of a-z0-9_.-).
-- The checkpoint write sets all three in the UPDATE it makes anyway. Rows
-- written before this migration get their stage from the latest checkpoint;
-- waiting_on and next_actor cannot be read in SQL (sealed), so they stay ''
-- until the session's next checkpoint.
ALTER TABLE sessions ADD COLUMN stage TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN waiting_on TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN next_actor TEXT NOT NULL DEFAULT '';
UPDATE sessions SET stage = COALESCE((SELECT c.stage FROM checkpoints c
    WHERE c.session_id = sessions.id AND c.seq = sessions.checkpoint_seq), '')
WHERE checkpoint_seq > 0;

-- run_seen_at lags the run's last sighting by at most --run-liveness/10
-- from now on: a checkpoint write moves it only when it lags by more
-- (store/checkpoints.go). Start every row there, so the liveness index
-- below is a sound pre-filter of max(run_seen_at, checkpoint_at).
UPDATE sessions SET run_seen_at = checkpoint_at WHERE checkpoint_at > run_seen_at;

-- Liveness filters (live=true|false), the liveness gauge and sort=activity
-- read this range. run_seen_at changes at most once per --run-liveness/10
-- per session, so the index costs little; no index holds a column every
-- checkpoint write changes (checkpoint_at, checkpoint_seq, updated_at,
-- event_seq), so an ordinary write stays a HOT update on PostgreSQL.
CREATE INDEX sessions_state_seen ON sessions (state, run_seen_at, id);
-- validity= lists and the validity gauge.
CREATE INDEX sessions_state_validity ON sessions (state, validity, id);
-- stage= lists; the stage changes with the work, not with every write.
CREATE INDEX sessions_stage ON sessions (stage, id);
-- waiting_on= lists: most sessions wait on nobody, so the index holds only
-- those that do (queries repeat the predicate so the planners may use it).
CREATE INDEX sessions_waiting_on ON sessions (waiting_on, id) WHERE waiting_on <> '';
-- Parked sessions (active, no current run), counted by the gauge.
CREATE INDEX sessions_parked ON sessions (id) WHERE state = 'active' AND current_run_id = '';

-- +goose Down
DROP INDEX sessions_parked;
DROP INDEX sessions_waiting_on;
DROP INDEX sessions_stage;
DROP INDEX sessions_state_validity;
DROP INDEX sessions_state_seen;
ALTER TABLE sessions DROP COLUMN next_actor;
ALTER TABLE sessions DROP COLUMN waiting_on;
ALTER TABLE sessions DROP COLUMN stage;
