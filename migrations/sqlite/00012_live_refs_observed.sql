-- +goose Up
-- Retention prunes live refs no active session is bound to, oldest first
-- (store/retention.go pruneLiveRefs).
CREATE INDEX live_refs_observed ON live_refs (observed_at, repo_key, ref);

-- +goose Down
DROP INDEX live_refs_observed;
