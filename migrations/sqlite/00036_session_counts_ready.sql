-- +goose Up
-- session_counts (00031) gains drain_ready in its key, so the drain's
-- count of the sessions in sessions_drain_blocking (NOT drain_ready OR
-- validity <> 'valid') is a sum over a few dozen rows, not a count of the
-- index: when every session blocks (right after a drain started and the
-- reset pass went through), that was every active session, on each status
-- read and decision. The table is recounted and its triggers made again
-- with the new key.
DROP TRIGGER sessions_count_insert;
DROP TRIGGER sessions_count_delete;
DROP TRIGGER sessions_count_update;
DROP TABLE session_counts;
CREATE TABLE session_counts (
    shard       TEXT NOT NULL,
    validity    TEXT NOT NULL,
    parked      BOOLEAN NOT NULL,
    drain_ready BOOLEAN NOT NULL,
    n           BIGINT NOT NULL,
    PRIMARY KEY (shard, validity, parked, drain_ready)
);
INSERT INTO session_counts (shard, validity, parked, drain_ready, n)
SELECT substr(id, -1), validity, current_run_id = '', drain_ready, COUNT(*) FROM sessions WHERE state = 'active'
GROUP BY substr(id, -1), validity, current_run_id = '', drain_ready;

-- +goose StatementBegin
CREATE TRIGGER sessions_count_insert AFTER INSERT ON sessions WHEN NEW.state = 'active'
BEGIN
    INSERT INTO session_counts (shard, validity, parked, drain_ready, n)
    VALUES (substr(NEW.id, -1), NEW.validity, NEW.current_run_id = '', NEW.drain_ready, 1)
    ON CONFLICT (shard, validity, parked, drain_ready) DO UPDATE SET n = n + excluded.n;
END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER sessions_count_delete AFTER DELETE ON sessions WHEN OLD.state = 'active'
BEGIN
    INSERT INTO session_counts (shard, validity, parked, drain_ready, n)
    VALUES (substr(OLD.id, -1), OLD.validity, OLD.current_run_id = '', OLD.drain_ready, -1)
    ON CONFLICT (shard, validity, parked, drain_ready) DO UPDATE SET n = n + excluded.n;
END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER sessions_count_update AFTER UPDATE OF state, validity, current_run_id, drain_ready ON sessions
WHEN (OLD.state = 'active' OR NEW.state = 'active') AND (OLD.state <> NEW.state
    OR OLD.validity <> NEW.validity OR (OLD.current_run_id = '') <> (NEW.current_run_id = '')
    OR OLD.drain_ready <> NEW.drain_ready)
BEGIN
    INSERT INTO session_counts (shard, validity, parked, drain_ready, n)
    SELECT substr(OLD.id, -1), OLD.validity, OLD.current_run_id = '', OLD.drain_ready, -1 WHERE OLD.state = 'active'
    ON CONFLICT (shard, validity, parked, drain_ready) DO UPDATE SET n = n + excluded.n;
    INSERT INTO session_counts (shard, validity, parked, drain_ready, n)
    SELECT substr(NEW.id, -1), NEW.validity, NEW.current_run_id = '', NEW.drain_ready, 1 WHERE NEW.state = 'active'
    ON CONFLICT (shard, validity, parked, drain_ready) DO UPDATE SET n = n + excluded.n;
END;
-- +goose StatementEnd

-- +goose Down
SELECT 1;
