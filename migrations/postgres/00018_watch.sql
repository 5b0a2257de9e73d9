-- +goose Up
-- The change feed (GET /v1/watch, docs/watch.md). A sequence is not
-- commit-ordered on PostgreSQL (id 10 may commit before id 9), so the feed
-- does not count rows: each row carries the id of the transaction that
-- wrote it, and the feed reader asks which of them became visible between
-- two snapshots (pg_visible_in_snapshot). That is exact, whatever the
-- commit order, on every replica and after a restart (store/feed.go).
-- epoch names this database's feed: a position from another database is
-- refused, never misread.
CREATE TABLE feed (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    epoch TEXT NOT NULL
);
INSERT INTO feed (id, epoch) VALUES (1, substr(md5(random()::text || clock_timestamp()::text), 1, 16));
ALTER TABLE events ADD COLUMN xid xid8 NOT NULL DEFAULT pg_current_xact_id();
CREATE INDEX events_xid ON events (xid);

-- drain_feed records the drain's life cycle (started, completed,
-- cancelled) once per drain, whatever the number of sessions: the drains
-- table itself keeps only the current state. Filled by a trigger on drains.
CREATE TABLE drain_feed (
    id       BIGSERIAL PRIMARY KEY,
    drain_id TEXT NOT NULL,
    change   TEXT NOT NULL,
    at       BIGINT NOT NULL,
    xid      xid8 NOT NULL DEFAULT pg_current_xact_id()
);
CREATE INDEX drain_feed_xid ON drain_feed (xid);
CREATE INDEX drain_feed_at ON drain_feed (at);

-- +goose StatementBegin
CREATE FUNCTION checkpointd_drain_feed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO drain_feed (drain_id, change, at) VALUES (NEW.id, 'started', NEW.started_at);
    ELSIF NEW.state <> OLD.state THEN
        INSERT INTO drain_feed (drain_id, change, at) VALUES (NEW.id, NEW.state, COALESCE(NEW.ended_at, NEW.started_at));
    END IF;
    RETURN NULL;
END $$;
-- +goose StatementEnd
CREATE TRIGGER drains_feed AFTER INSERT OR UPDATE OF state ON drains
    FOR EACH ROW EXECUTE FUNCTION checkpointd_drain_feed();

-- The wake-up of every replica's feed reader: a statement-level trigger
-- queues one NOTIFY per writing transaction (PostgreSQL folds identical
-- payloads), delivered at commit and dropped on rollback, and costs the
-- write path no round trip. The payload is the schema, so readers of other
-- schemas of the same database ignore it; the rows are read from the table.
-- +goose StatementBegin
CREATE FUNCTION checkpointd_feed_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('checkpointd_feed', current_schema());
    RETURN NULL;
END $$;
-- +goose StatementEnd
CREATE TRIGGER events_feed_notify AFTER INSERT ON events
    FOR EACH STATEMENT EXECUTE FUNCTION checkpointd_feed_notify();
CREATE TRIGGER drain_feed_notify AFTER INSERT ON drain_feed
    FOR EACH STATEMENT EXECUTE FUNCTION checkpointd_feed_notify();

-- unresponsive_run is the run whose crossing of --run-liveness was already
-- recorded (a run.unresponsive event): once per run.
ALTER TABLE sessions ADD COLUMN unresponsive_run TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE sessions DROP COLUMN unresponsive_run;
DROP TRIGGER drain_feed_notify ON drain_feed;
DROP TRIGGER events_feed_notify ON events;
DROP FUNCTION checkpointd_feed_notify();
DROP TRIGGER drains_feed ON drains;
DROP FUNCTION checkpointd_drain_feed();
DROP TABLE drain_feed;
ALTER TABLE events DROP COLUMN xid;
DROP TABLE feed;
