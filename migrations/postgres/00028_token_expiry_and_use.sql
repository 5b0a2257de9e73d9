-- +goose Up
-- The token API: a token may expire (expires_at, NULL: never), and says
-- when it was last used (last_used_at, written at most once a minute per
-- token, NULL: never). Times in microseconds since the epoch, as
-- everywhere.
ALTER TABLE api_tokens ADD COLUMN expires_at BIGINT;
ALTER TABLE api_tokens ADD COLUMN last_used_at BIGINT;

-- +goose Down
ALTER TABLE api_tokens DROP COLUMN last_used_at;
ALTER TABLE api_tokens DROP COLUMN expires_at;
