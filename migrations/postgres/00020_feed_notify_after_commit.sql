-- +goose Up
-- The feed's wake-up leaves the writing transaction (store/feed_notify.go).
-- A NOTIFY inside a transaction makes its commit take a database-wide lock
-- from before the commit until the commit record is flushed, so every
-- transaction that wrote events waited for every other one's fsync: at 16
-- concurrent writers the raw checkpoint transaction ran ~2.3 times slower
-- with the trigger than without (docs/performance.md). Each replica now
-- sends the wake-up itself, after its commits, at most once per few
-- milliseconds, from a transaction of its own.
DROP TRIGGER events_feed_notify ON events;
DROP TRIGGER drain_feed_notify ON drain_feed;
DROP FUNCTION checkpointd_feed_notify();

-- +goose Down
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
