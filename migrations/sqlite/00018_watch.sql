-- +goose Up
-- The change feed (GET /v1/watch, docs/watch.md). SQLite has one writer,
-- so a counter bumped inside the writing transaction is commit-ordered:
-- every event row gets the next feed_id when it is inserted (a trigger,
-- so no write path changes and no statement is added), and "feed_id > N"
-- is exactly what a watcher at N has not seen. The counter lives in its own
-- row rather than in rowids, which SQLite may reuse after a delete.
-- epoch names this database's feed: a position from another database (or
-- a restored copy that fell behind) is refused, never misread.
CREATE TABLE feed (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    epoch   TEXT NOT NULL,
    last_id INTEGER NOT NULL
);
INSERT INTO feed (id, epoch, last_id)
VALUES (1, lower(hex(randomblob(8))), (SELECT COALESCE(MAX(rowid), 0) FROM events));
ALTER TABLE events ADD COLUMN feed_id INTEGER;
UPDATE events SET feed_id = rowid;
CREATE INDEX events_feed ON events (feed_id);

-- drain_feed records the drain's life cycle (started, completed,
-- cancelled) once per drain, whatever the number of sessions: the drains
-- table itself keeps only the current state. Filled by triggers on drains.
CREATE TABLE drain_feed (
    id       INTEGER PRIMARY KEY,
    drain_id TEXT NOT NULL,
    change   TEXT NOT NULL,
    at       BIGINT NOT NULL,
    feed_id  INTEGER
);
CREATE INDEX drain_feed_feed ON drain_feed (feed_id);
CREATE INDEX drain_feed_at ON drain_feed (at);

-- +goose StatementBegin
CREATE TRIGGER events_feed_id AFTER INSERT ON events BEGIN
    UPDATE feed SET last_id = last_id + 1;
    UPDATE events SET feed_id = (SELECT last_id FROM feed) WHERE rowid = NEW.rowid;
END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER drain_feed_id AFTER INSERT ON drain_feed BEGIN
    UPDATE feed SET last_id = last_id + 1;
    UPDATE drain_feed SET feed_id = (SELECT last_id FROM feed) WHERE id = NEW.id;
END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER drains_feed_started AFTER INSERT ON drains BEGIN
    INSERT INTO drain_feed (drain_id, change, at) VALUES (NEW.id, 'started', NEW.started_at);
END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER drains_feed_ended AFTER UPDATE OF state ON drains WHEN NEW.state <> OLD.state BEGIN
    INSERT INTO drain_feed (drain_id, change, at) VALUES (NEW.id, NEW.state, COALESCE(NEW.ended_at, NEW.started_at));
END;
-- +goose StatementEnd

-- unresponsive_run is the run whose crossing of --run-liveness was already
-- recorded (a run.unresponsive event): once per run.
ALTER TABLE sessions ADD COLUMN unresponsive_run TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE sessions DROP COLUMN unresponsive_run;
DROP TRIGGER drains_feed_ended;
DROP TRIGGER drains_feed_started;
DROP TRIGGER drain_feed_id;
DROP TRIGGER events_feed_id;
DROP TABLE drain_feed;
DROP INDEX events_feed;
ALTER TABLE events DROP COLUMN feed_id;
DROP TABLE feed;
