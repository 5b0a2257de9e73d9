-- +goose Up
-- What is left of a session that an operator force-cleared (kind 'cleared')
-- or retention pruned after it ended (kind 'pruned'): the audit record of
-- the removal (who, when, why, what it removed, as JSON counts) and the
-- reason a late request naming the session answers 410 gone instead of
-- resurrecting it. Only read when a session lookup finds nothing, so the
-- hot path never touches it.
CREATE TABLE tombstones (
    session_id         TEXT PRIMARY KEY,
    repo               TEXT NOT NULL,
    repo_key           TEXT NOT NULL,
    role               TEXT NOT NULL DEFAULT '',
    kind               TEXT NOT NULL,
    at                 BIGINT NOT NULL,
    actor              TEXT NOT NULL DEFAULT '', -- operator token name, or 'retention'
    reason             TEXT NOT NULL DEFAULT '', -- redacted
    session_state      TEXT NOT NULL DEFAULT '',
    session_created_at BIGINT NOT NULL DEFAULT 0,
    removed            TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX tombstones_at ON tombstones (at);

-- The checkpoint a validity change or a drain decision refers to (the
-- session's latest when the event was written): retention keeps every
-- checkpoint an event still in the log refers to. Events written before
-- this migration get the latest checkpoint written at or before them.
ALTER TABLE events ADD COLUMN checkpoint_seq BIGINT;
UPDATE events SET checkpoint_seq = (SELECT MAX(c.seq) FROM checkpoints c
    WHERE c.session_id = events.session_id AND c.created_at <= events.at)
WHERE kind IN ('validity.changed', 'drain.blocked', 'drain.completed');
CREATE INDEX events_checkpoint ON events (session_id, checkpoint_seq) WHERE checkpoint_seq IS NOT NULL;

-- Retention finds ended sessions past their age by this index.
CREATE INDEX sessions_ended_at ON sessions (ended_at) WHERE state = 'ended';

-- +goose Down
SELECT 1;
