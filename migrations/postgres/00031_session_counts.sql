-- +goose Up
-- The active sessions by validity and by parked or not, kept by triggers
-- so the fleet counts (GET /v1/fleet, the console, /metrics) and the drain
-- status read 16 × 4 × 2 rows, not every active session; no code path
-- (create, write, webhook, reconcile, park, end, clear, retention) can
-- forget them. Sharded by the last character of the session id (random
-- hex), as active_sessions was, so concurrent changes seldom wait on one
-- row. It replaces active_sessions: their sum is the number of active
-- sessions.
CREATE TABLE session_counts (
    shard    TEXT NOT NULL,
    validity TEXT NOT NULL,
    parked   BOOLEAN NOT NULL,
    n        BIGINT NOT NULL,
    PRIMARY KEY (shard, validity, parked)
);
INSERT INTO session_counts (shard, validity, parked, n)
SELECT right(id, 1), validity, current_run_id = '', COUNT(*) FROM sessions WHERE state = 'active'
GROUP BY right(id, 1), validity, current_run_id = '';

DROP TRIGGER sessions_count_active ON sessions;
DROP FUNCTION count_active_sessions();
DROP TABLE active_sessions;

-- A change moves one session from its old row to its new one, both of its
-- shard; the one of lower key is taken first, so two changes of one shard
-- never wait for each other crosswise.
-- +goose StatementBegin
CREATE FUNCTION count_sessions() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    was TEXT := NULL;
    now_key TEXT := NULL;
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.state = 'active' THEN
        was := OLD.validity || CASE WHEN OLD.current_run_id = '' THEN '/t' ELSE '/f' END;
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.state = 'active' THEN
        now_key := NEW.validity || CASE WHEN NEW.current_run_id = '' THEN '/t' ELSE '/f' END;
    END IF;
    IF was IS NOT NULL AND (now_key IS NULL OR was < now_key) THEN
        PERFORM count_session(right(OLD.id, 1), OLD.validity, OLD.current_run_id = '', -1);
        was := NULL;
    END IF;
    IF now_key IS NOT NULL THEN
        PERFORM count_session(right(NEW.id, 1), NEW.validity, NEW.current_run_id = '', 1);
    END IF;
    IF was IS NOT NULL THEN
        PERFORM count_session(right(OLD.id, 1), OLD.validity, OLD.current_run_id = '', -1);
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE FUNCTION count_session(s TEXT, v TEXT, p BOOLEAN, d BIGINT) RETURNS void LANGUAGE sql AS $$
    INSERT INTO session_counts (shard, validity, parked, n) VALUES (s, v, p, d)
    ON CONFLICT (shard, validity, parked) DO UPDATE SET n = session_counts.n + EXCLUDED.n;
$$;
-- +goose StatementEnd
CREATE TRIGGER sessions_count_insert AFTER INSERT ON sessions
    FOR EACH ROW WHEN (NEW.state = 'active') EXECUTE FUNCTION count_sessions();
CREATE TRIGGER sessions_count_delete AFTER DELETE ON sessions
    FOR EACH ROW WHEN (OLD.state = 'active') EXECUTE FUNCTION count_sessions();
CREATE TRIGGER sessions_count_update AFTER UPDATE OF state, validity, current_run_id ON sessions
    FOR EACH ROW WHEN ((OLD.state = 'active' OR NEW.state = 'active') AND (OLD.state <> NEW.state
        OR OLD.validity <> NEW.validity OR (OLD.current_run_id = '') <> (NEW.current_run_id = '')))
    EXECUTE FUNCTION count_sessions();

-- +goose Down
SELECT 1;
