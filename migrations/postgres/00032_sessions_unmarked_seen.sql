-- +goose Up
-- The runs the liveness pass may have to report unresponsive: the current
-- runs of active sessions not yet reported, by their recorded sighting.
-- The pass reads the range before the window's cutoff, which holds the
-- runs unheard for the window and those heard within the last refresh of
-- it by a checkpoint only (a write moves run_seen_at when it lags by more
-- than the refresh) — not every active session, as the scan it replaces
-- did on every tick. A write changes none of its columns except at most
-- once per refresh, so it keeps the write's update HOT on PostgreSQL.
CREATE INDEX sessions_unmarked_seen ON sessions (run_seen_at, id)
    WHERE state = 'active' AND current_run_id <> '' AND unresponsive_run <> current_run_id;

-- +goose Down
DROP INDEX sessions_unmarked_seen;
