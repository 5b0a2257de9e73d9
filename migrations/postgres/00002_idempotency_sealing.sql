-- +goose Up
-- Free-text fields of a checkpoint are stored sealed (AES-256-GCM, after
-- redaction) in their own column; rows written before keep them in document.
ALTER TABLE checkpoints ADD COLUMN sealed TEXT NOT NULL DEFAULT '';

-- Idempotency-Key records. A request first claims its key (committed on its
-- own, so a concurrent duplicate sees it in flight); the write then stores
-- its response under the claim in the write's own transaction, so a replay
-- returns exactly what was acknowledged and a crash never records a
-- response without its effect.
CREATE TABLE idempotency (
    scope      TEXT NOT NULL, -- session id for checkpoint writes, tok:<token id> for session creation
    idem_key   TEXT NOT NULL,
    digest     TEXT NOT NULL, -- keyed digest of the pre-redaction request
    claim      TEXT NOT NULL, -- the processing request's claim; '' once done
    claimed_at BIGINT NOT NULL,
    status     INTEGER NOT NULL DEFAULT 0, -- 0 while in flight
    response   TEXT NOT NULL DEFAULT '',  -- sealed response body
    created_at BIGINT NOT NULL,
    PRIMARY KEY (scope, idem_key)
);
CREATE INDEX idempotency_created ON idempotency (created_at);

-- +goose Down
SELECT 1;
