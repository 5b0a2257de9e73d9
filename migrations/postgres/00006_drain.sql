-- +goose Up
-- Drain readiness kept on the session row, so the drain gate finds the
-- sessions that block it through one partial index (their number), never by
-- joining every active session to its checkpoints (the total).
--   checkpoint_at    created_at of the latest checkpoint (0: none yet)
--   latest_complete  whether the latest checkpoint is complete
--   latest_missing   its unmet completeness rules (JSON array)
--   drain_ready      a complete checkpoint was written since the open drain
--                    started and no write by the current run failed since:
--                    starting a drain sets it false on every active session,
--                    each checkpoint write sets it to the checkpoint's
--                    completeness, a recorded write failure sets it false
--   write_failed_at  when a checkpoint write by the current run last failed
--                    during a drain; cleared by the next successful write
--   drain_noted_at   when a drain decision was last recorded in the
--                    session's event log: a blocked decision is recorded in
--                    a session's log once per drain (its later changes are
--                    in the log as their own events)
ALTER TABLE sessions ADD COLUMN checkpoint_at BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN latest_complete BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE sessions ADD COLUMN latest_missing TEXT NOT NULL DEFAULT '[]';
ALTER TABLE sessions ADD COLUMN drain_ready BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE sessions ADD COLUMN write_failed_at BIGINT;
ALTER TABLE sessions ADD COLUMN write_failed_code TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN drain_noted_at BIGINT;

UPDATE sessions SET
    checkpoint_at = COALESCE((SELECT c.created_at FROM checkpoints c
        WHERE c.session_id = sessions.id AND c.seq = sessions.checkpoint_seq), 0),
    latest_complete = COALESCE((SELECT c.complete FROM checkpoints c
        WHERE c.session_id = sessions.id AND c.seq = sessions.checkpoint_seq), FALSE),
    latest_missing = COALESCE((SELECT c.missing FROM checkpoints c
        WHERE c.session_id = sessions.id AND c.seq = sessions.checkpoint_seq), '[]')
WHERE checkpoint_seq > 0;
UPDATE sessions SET drain_ready = latest_complete;

-- The sessions that block a drain. Queries repeat this predicate verbatim so
-- the planners may use the index (SQLite is told to: store/drain.go);
-- validity, drain_ready and drain_noted_at are in the key so counting the
-- blocking sessions, finding those only unverified and those whose log has
-- no decision of the drain yet read the index alone. None of them changes
-- on an ordinary checkpoint write, which stays a HOT update on PostgreSQL.
CREATE INDEX sessions_drain_blocking ON sessions (id, validity, drain_ready, drain_noted_at)
    WHERE state = 'active' AND (NOT drain_ready OR validity <> 'valid');

-- One row per drain. is_open is 1 for the drain that gates new sessions and
-- runs (running, or completed and not yet lifted) and NULL otherwise: the
-- unique index makes "at most one open drain" the database's invariant.
CREATE TABLE drains (
    id         TEXT PRIMARY KEY,
    reason     TEXT NOT NULL DEFAULT '',
    started_at BIGINT NOT NULL,
    started_by TEXT NOT NULL DEFAULT '',
    state      TEXT NOT NULL, -- running, completed or cancelled
    ended_at   BIGINT,
    ended_by   TEXT NOT NULL DEFAULT '',
    lifted_at  BIGINT,
    is_open    SMALLINT UNIQUE,
    decisions  BIGINT NOT NULL DEFAULT 0,
    decision   TEXT NOT NULL DEFAULT '' -- the latest decision (JSON)
);
CREATE INDEX drains_started ON drains (started_at);

-- The number of active sessions, kept by triggers so the drain status need
-- not count 100k rows, and no code path (create, end, delete) can forget
-- it. Sharded by the last character of the session id (random hex), so
-- concurrent creates and ends on PostgreSQL seldom wait on one row.
CREATE TABLE active_sessions (
    shard TEXT PRIMARY KEY,
    n     BIGINT NOT NULL
);
INSERT INTO active_sessions (shard, n)
SELECT right(id, 1), COUNT(*) FROM sessions WHERE state = 'active' GROUP BY right(id, 1);

-- +goose StatementBegin
CREATE FUNCTION count_active_sessions() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    delta BIGINT := 0;
    sid   TEXT;
BEGIN
    IF TG_OP = 'INSERT' THEN
        sid := NEW.id;
        IF NEW.state = 'active' THEN delta := 1; END IF;
    ELSIF TG_OP = 'DELETE' THEN
        sid := OLD.id;
        IF OLD.state = 'active' THEN delta := -1; END IF;
    ELSE
        sid := NEW.id;
        IF NEW.state = 'active' AND OLD.state <> 'active' THEN delta := 1;
        ELSIF OLD.state = 'active' AND NEW.state <> 'active' THEN delta := -1;
        END IF;
    END IF;
    IF delta <> 0 THEN
        INSERT INTO active_sessions (shard, n) VALUES (right(sid, 1), delta)
        ON CONFLICT (shard) DO UPDATE SET n = active_sessions.n + EXCLUDED.n;
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER sessions_count_active AFTER INSERT OR DELETE OR UPDATE OF state ON sessions
    FOR EACH ROW EXECUTE FUNCTION count_active_sessions();

-- +goose Down
SELECT 1;
