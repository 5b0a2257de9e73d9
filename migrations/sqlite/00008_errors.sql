-- +goose Up
-- Durable errors (docs/errors.md): failures that matter after the request
-- or pass that met them, kept apart from the per-session event log because
-- most have no session (a refused webhook, a repository reconcile could
-- not check). Append-only; the store keeps the newest rows per source
-- (10 000 by default, --errors-keep), trimming in the inserting
-- transaction. Never a request body, a signature or a token: detail is
-- redacted and at most 1024 bytes.
--   repo_key  lower-cased repo, for the scope filter of GET /v1/errors;
--             '' when the error names no repository
CREATE TABLE errors (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    at         BIGINT NOT NULL,
    source     TEXT NOT NULL,
    code       TEXT NOT NULL,
    session_id TEXT NOT NULL DEFAULT '',
    repo       TEXT NOT NULL DEFAULT '',
    repo_key   TEXT NOT NULL DEFAULT '',
    delivery   TEXT NOT NULL DEFAULT '',
    event      TEXT NOT NULL DEFAULT '',
    detail     TEXT NOT NULL DEFAULT ''
);
-- The per-source trim and the source filter walk this index newest first.
CREATE INDEX errors_source_id ON errors (source, id);

-- +goose Down
SELECT 1;
