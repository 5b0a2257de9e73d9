-- +goose Up
-- session_counts (00031) gains drain_ready in its key, so the drain's
-- count of the sessions in sessions_drain_blocking (NOT drain_ready OR
-- validity <> 'valid') is a sum over a few dozen rows, not a count of the
-- index: when every session blocks (right after a drain started and the
-- reset pass went through), that was every active session, on each status
-- read and decision (84 ms and 260 ms at 100k). The table is recounted
-- and its triggers made again with the new key.
DROP TRIGGER sessions_count_insert ON sessions;
DROP TRIGGER sessions_count_delete ON sessions;
DROP TRIGGER sessions_count_update ON sessions;
DROP FUNCTION count_sessions();
DROP FUNCTION count_session(TEXT, TEXT, BOOLEAN, BIGINT);
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
SELECT right(id, 1), validity, current_run_id = '', drain_ready, COUNT(*) FROM sessions WHERE state = 'active'
GROUP BY right(id, 1), validity, current_run_id = '', drain_ready;

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
        was := OLD.validity || CASE WHEN OLD.current_run_id = '' THEN '/t' ELSE '/f' END
            || CASE WHEN OLD.drain_ready THEN '/t' ELSE '/f' END;
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.state = 'active' THEN
        now_key := NEW.validity || CASE WHEN NEW.current_run_id = '' THEN '/t' ELSE '/f' END
            || CASE WHEN NEW.drain_ready THEN '/t' ELSE '/f' END;
    END IF;
    IF was IS NOT NULL AND (now_key IS NULL OR was < now_key) THEN
        PERFORM count_session(right(OLD.id, 1), OLD.validity, OLD.current_run_id = '', OLD.drain_ready, -1);
        was := NULL;
    END IF;
    IF now_key IS NOT NULL THEN
        PERFORM count_session(right(NEW.id, 1), NEW.validity, NEW.current_run_id = '', NEW.drain_ready, 1);
    END IF;
    IF was IS NOT NULL THEN
        PERFORM count_session(right(OLD.id, 1), OLD.validity, OLD.current_run_id = '', OLD.drain_ready, -1);
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE FUNCTION count_session(s TEXT, v TEXT, p BOOLEAN, r BOOLEAN, d BIGINT) RETURNS void LANGUAGE sql AS $$
    INSERT INTO session_counts (shard, validity, parked, drain_ready, n) VALUES (s, v, p, r, d)
    ON CONFLICT (shard, validity, parked, drain_ready) DO UPDATE SET n = session_counts.n + EXCLUDED.n;
$$;
-- +goose StatementEnd
CREATE TRIGGER sessions_count_insert AFTER INSERT ON sessions
    FOR EACH ROW WHEN (NEW.state = 'active') EXECUTE FUNCTION count_sessions();
CREATE TRIGGER sessions_count_delete AFTER DELETE ON sessions
    FOR EACH ROW WHEN (OLD.state = 'active') EXECUTE FUNCTION count_sessions();
CREATE TRIGGER sessions_count_update AFTER UPDATE OF state, validity, current_run_id, drain_ready ON sessions
    FOR EACH ROW WHEN ((OLD.state = 'active' OR NEW.state = 'active') AND (OLD.state <> NEW.state
        OR OLD.validity <> NEW.validity OR (OLD.current_run_id = '') <> (NEW.current_run_id = '')
        OR OLD.drain_ready <> NEW.drain_ready))
    EXECUTE FUNCTION count_sessions();

-- +goose Down
SELECT 1;
