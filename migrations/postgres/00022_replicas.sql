-- +goose Up
-- The replicas serving the database, each announced by itself at its start
-- and forgotten when it leaves cleanly with nothing kept (DESIGN §9). A
-- drain completion asks every replica here to confirm that it keeps no
-- failed checkpoint write the store has not recorded (its journal):
--   confirmed  the last confirmation request (drain_barrier.request) the
--              replica answered with nothing kept
--   pending    failed writes it reported keeping at heard_at
--   unknown    why what it keeps cannot be known ('' when it can), cleared
--              only by an operator's override
CREATE TABLE replicas (
    id         TEXT PRIMARY KEY,
    host       TEXT NOT NULL,
    pid        BIGINT NOT NULL,
    version    TEXT NOT NULL,
    started_at BIGINT NOT NULL,
    heard_at   BIGINT NOT NULL,
    confirmed  BIGINT NOT NULL DEFAULT 0,
    pending    BIGINT NOT NULL DEFAULT 0,
    unknown    TEXT NOT NULL DEFAULT ''
);

-- The number of the latest confirmation request: a completion increments
-- it, and every replica answers by setting its confirmed to it.
CREATE TABLE drain_barrier (
    id      SMALLINT PRIMARY KEY CHECK (id = 1),
    request BIGINT NOT NULL
);
INSERT INTO drain_barrier (id, request) VALUES (1, 0);

-- +goose Down
DROP TABLE drain_barrier;
DROP TABLE replicas;
