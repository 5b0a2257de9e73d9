-- +goose Up
-- A drain's completion no longer locks, reads back and notes every active
-- session in its one transaction (8-10 s at 100k). What it vouched for is
-- kept here: a background pass reads back the latest checkpoint of each
-- session ready for the running drain and records its seq, the completion
-- reads back only the sessions written since and keeps the rows of the
-- sessions active at its commit, and the drain.completed events are
-- written from them after it committed, a chunk at a time, each row
-- deleted with its event.
CREATE TABLE drain_vouches (
    epoch          BIGINT NOT NULL,
    session_id     TEXT NOT NULL,
    checkpoint_seq BIGINT NOT NULL,
    PRIMARY KEY (epoch, session_id)
);

-- A change that makes a ready session block (it stops being valid or
-- ready) holds the drain's readiness lock shared to its commit; a
-- completion holds it exclusively while it decides, so such a change has
-- either committed before the completion counted, or waits for it. It is
-- the key of lockSQL in the store, of the name drain-readiness.
-- +goose StatementBegin
CREATE FUNCTION hold_drain_readiness() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtextextended(current_schema() || ':checkpointd:drain-readiness', 0));
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER sessions_leave_ready AFTER UPDATE OF state, validity, drain_ready ON sessions
    FOR EACH ROW WHEN (OLD.state = 'active' AND OLD.validity = 'valid' AND OLD.drain_ready
        AND NEW.state = 'active' AND (NEW.validity <> 'valid' OR NOT NEW.drain_ready))
    EXECUTE FUNCTION hold_drain_readiness();

-- +goose Down
SELECT 1;
