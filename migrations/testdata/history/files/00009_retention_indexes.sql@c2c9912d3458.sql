-- +goose Up
-- Retention prunes events by age, oldest first, through this index instead
-- of reading the whole table every batch. Its write cost on the busiest
-- append-only table is small: `at` comes from the clock and only grows, so
-- every insert lands on the right edge of the index (the same page, hot in
-- memory) and the index never splits in the middle. Building it blocks
-- writes to events while it runs (about 1 s per 2M events on PostgreSQL
-- 15); the daemon migrates before it serves.
CREATE INDEX events_at ON events (at);

-- How far retention has gone through the session's checkpoints: every
-- checkpoint with seq <= this mark is either gone or was referred to by an
-- event when retention passed it. A pass visits only sessions whose
-- checkpoint_seq - keep is past the mark, so a pass with nothing to prune
-- reads the sessions, not the checkpoints. Pruning an event that refers to
-- a checkpoint at or below the mark moves the mark back below it
-- (docs/retention.md).
ALTER TABLE sessions ADD COLUMN checkpoints_pruned_through BIGINT NOT NULL DEFAULT 0;

-- +goose Down
SELECT 1;
