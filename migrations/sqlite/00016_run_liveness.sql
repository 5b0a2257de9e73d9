-- +goose Up
-- Run liveness (DESIGN §2): run_seen_at is when the session's current run
-- was last heard from by a call other than a checkpoint write, whose time
-- checkpoint_at already records; the run's last_seen_at is the later of
-- the two, so a checkpoint write costs no extra column. Parking a session
-- leaves current_run_id '' (no current run): every check of the current
-- run then fences the parked run off, as a takeover does.
ALTER TABLE sessions ADD COLUMN run_seen_at BIGINT NOT NULL DEFAULT 0;
UPDATE sessions SET run_seen_at = COALESCE((SELECT r.started_at FROM runs r WHERE r.id = sessions.current_run_id), 0);

-- +goose Down
ALTER TABLE sessions DROP COLUMN run_seen_at;
