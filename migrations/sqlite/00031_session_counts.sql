-- +goose Up
-- The active sessions by validity and by parked or not, kept by triggers
-- so the fleet counts (GET /v1/fleet, the console, /metrics) and the drain
-- status read 16 × 4 × 2 rows, not every active session; no code path
-- (create, write, webhook, reconcile, park, end, clear, retention) can
-- forget them. Sharded by the last character of the session id, as
-- active_sessions was (PostgreSQL's concurrent writers need it; one
-- schema for both). It replaces active_sessions: their sum is the number
-- of active sessions.
CREATE TABLE session_counts (
    shard    TEXT NOT NULL,
    validity TEXT NOT NULL,
    parked   BOOLEAN NOT NULL,
    n        BIGINT NOT NULL,
    PRIMARY KEY (shard, validity, parked)
);
INSERT INTO session_counts (shard, validity, parked, n)
SELECT substr(id, -1), validity, current_run_id = '', COUNT(*) FROM sessions WHERE state = 'active'
GROUP BY substr(id, -1), validity, current_run_id = '';

DROP TRIGGER sessions_active_insert;
DROP TRIGGER sessions_active_update;
DROP TRIGGER sessions_active_delete;
DROP TABLE active_sessions;

-- +goose StatementBegin
CREATE TRIGGER sessions_count_insert AFTER INSERT ON sessions WHEN NEW.state = 'active'
BEGIN
    INSERT INTO session_counts (shard, validity, parked, n)
    VALUES (substr(NEW.id, -1), NEW.validity, NEW.current_run_id = '', 1)
    ON CONFLICT (shard, validity, parked) DO UPDATE SET n = n + excluded.n;
END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER sessions_count_delete AFTER DELETE ON sessions WHEN OLD.state = 'active'
BEGIN
    INSERT INTO session_counts (shard, validity, parked, n)
    VALUES (substr(OLD.id, -1), OLD.validity, OLD.current_run_id = '', -1)
    ON CONFLICT (shard, validity, parked) DO UPDATE SET n = n + excluded.n;
END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER sessions_count_update AFTER UPDATE OF state, validity, current_run_id ON sessions
WHEN (OLD.state = 'active' OR NEW.state = 'active') AND (OLD.state <> NEW.state
    OR OLD.validity <> NEW.validity OR (OLD.current_run_id = '') <> (NEW.current_run_id = ''))
BEGIN
    INSERT INTO session_counts (shard, validity, parked, n)
    SELECT substr(OLD.id, -1), OLD.validity, OLD.current_run_id = '', -1 WHERE OLD.state = 'active'
    ON CONFLICT (shard, validity, parked) DO UPDATE SET n = n + excluded.n;
    INSERT INTO session_counts (shard, validity, parked, n)
    SELECT substr(NEW.id, -1), NEW.validity, NEW.current_run_id = '', 1 WHERE NEW.state = 'active'
    ON CONFLICT (shard, validity, parked) DO UPDATE SET n = n + excluded.n;
END;
-- +goose StatementEnd

-- +goose Down
SELECT 1;
