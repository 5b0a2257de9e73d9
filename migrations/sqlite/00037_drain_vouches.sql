-- +goose Up
-- A drain's completion no longer locks, reads back and notes every active
-- session in its one transaction. What it vouched for is kept here: a
-- background pass reads back the latest checkpoint of each session ready
-- for the running drain and records its seq, the completion reads back
-- only the sessions written since and keeps the rows of the sessions
-- active at its commit, and the drain.completed events are written from
-- them after it committed, a chunk at a time, each row deleted with its
-- event. SQLite's one writer serialises the completion with every change.
CREATE TABLE drain_vouches (
    epoch          INTEGER NOT NULL,
    session_id     TEXT NOT NULL,
    checkpoint_seq INTEGER NOT NULL,
    PRIMARY KEY (epoch, session_id)
) WITHOUT ROWID;

-- +goose Down
SELECT 1;
