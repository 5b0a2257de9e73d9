-- +goose Up
-- session_find and GET /v1/sessions?repo=…&issue=… (or pr=…): how a
-- restarted agent finds its session and the next actor what waits on it.
-- Both filters need an exact repo, so one index walk per query answers
-- them, newest first, however many sessions the repo has.
CREATE INDEX sessions_repo_issue ON sessions (repo_key, issue, id);
CREATE INDEX sessions_repo_pr ON sessions (repo_key, pr, id);

-- +goose Down
DROP INDEX sessions_repo_pr;
DROP INDEX sessions_repo_issue;
