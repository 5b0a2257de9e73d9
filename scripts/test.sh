#!/bin/sh
# The tests, as the README runs them: `go test -race ./...`, after saying
# which parts will skip on this machine and how to run them. (A skip is
# silent in `go test ./...`: it prints only "ok" for a package that
# passes.) Extra arguments go to go test: scripts/test.sh -run TestX
set -eu
cd "$(dirname "$0")/.."
note() { echo "test: $*" >&2; }
if [ -z "${CHECKPOINTD_TEST_DATABASE_URL:-}" ]; then
	note "the PostgreSQL half will skip: set CHECKPOINTD_TEST_DATABASE_URL, e.g. 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable' (README, Testing)"
fi
[ -x /usr/bin/chromium ] || note "the console's browser tests will skip: install Debian's chromium (/usr/bin/chromium)"
for tool in curl jq openssl; do
	command -v "$tool" >/dev/null || note "the README walkthrough's test will skip: install $tool"
done
command -v promtool >/dev/null || note "the alert rules' check will skip: install Debian's prometheus (promtool)"
command -v systemd-analyze >/dev/null || note "the systemd unit's check will skip: install systemd (systemd-analyze)"
command -v buildah >/dev/null || command -v podman >/dev/null || note "the container image's build will skip: install buildah or podman"
command -v git >/dev/null || note "the worktree and migration-history tests will skip: install git"
command -v sqlite3 >/dev/null || note "the backup document's test will skip: install sqlite3"
exec go test -race "$@" ./...
