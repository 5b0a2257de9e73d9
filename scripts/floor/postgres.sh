#!/usr/bin/env bash
# postgres.sh [SECONDS] — the raw PostgreSQL floor for a checkpoint write.
#
# Creates a scratch database (checkpointd_floor), applies the Up sections of
# migrations/postgres/*.sql, seeds one active session per client and
# runs pgbench (-M prepared) for SECONDS (default 10, at most 300) with two
# scripts of the same shape as store.WriteCheckpoint:
#
#   postgres-tx   checkpoint.sql      BEGIN; UPDATE sessions … RETURNING;
#                                      INSERT checkpoint (~3 KB document);
#                                      INSERT event; COMMIT  (5 round trips)
#   postgres-cte  checkpoint_cte.sql  the same as one data-modifying CTE
#                                      (1 round trip)
#   postgres-fn   checkpoint_fn.sql   the daemon's own one-statement write
#                                      (the function of migration 00019)
#
# and prints one line per variant:
#
#   floor postgres-tx clients=16 seconds=10 doc_bytes=3029 tps=3012.4 p50_ms=4.91 p99_ms=11.20
#
# p50/p99 come from pgbench's per-transaction log (--log). Commits are durable
# (whatever synchronous_commit the server runs with, as the daemon gets). The
# database is dropped on exit, also on error or Ctrl-C.
#
# Connection: the usual libpq variables, defaulting to the local test server
# (PGHOST=127.0.0.1 PGPORT=5432 PGUSER=postgres); ADMIN_DB is the database
# the scratch one is created from (default postgres). CLIENTS (default 16)
# and THREADS (default: the number of CPUs) tune pgbench.
set -euo pipefail

seconds=${1:-10}
if ! [[ $seconds =~ ^[0-9]+$ ]] || ((seconds < 1 || seconds > 300)); then
	echo "usage: $0 [SECONDS 1-300]" >&2
	exit 2
fi
clients=${CLIENTS:-16}
threads=${THREADS:-$(nproc)}
((threads > clients)) && threads=$clients
export PGHOST=${PGHOST:-127.0.0.1} PGPORT=${PGPORT:-5432} PGUSER=${PGUSER:-postgres}
admin_db=${ADMIN_DB:-postgres}
db=${FLOOR_DB:-checkpointd_floor}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

tmp=$(mktemp -d)
cleanup() {
	psql -q -X -d "$admin_db" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

psql -q -X -v ON_ERROR_STOP=1 -d "$admin_db" -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db" >/dev/null
# The Up sections of every migration, in order: the schema exactly as the
# daemon migrates it.
for f in "$root"/migrations/postgres/*.sql; do
	sed -n '/^-- +goose Up/,/^-- +goose Down/p' "$f"
done | psql -q -X -v ON_ERROR_STOP=1 -d "$db" >/dev/null

# The reference document, on one line (~3 KB), goes whole into the document
# column and the sealed column stays empty: the floor is the plain
# transaction the issue defines. (The daemon stores the same document as ~0.9
# KB of clear JSON plus ~2.6 KB sealed; docs/performance.md says what that
# costs.)
doc=$(tr -s '\n ' ' ' <"$root/testdata/checkpoint-full.json" | sed 's/^ //; s/ $//')
digest="hmac-sha256:v1:$(printf %064d 0)"
evtail=',"stage":"addressing_review","complete":true,"missing":[],"digest":"'"$digest"'"}'
# What a session nothing was observed for is judged (checkpointd.ReasonNoLiveHead):
# the function writes only when the verdict stays.
noliveref="no live head observed yet: no webhook or reconcile pass has reported the session's branch or pull request"
defines=(
	-D "now=1767225600000000" -D "pr=34" -D "branch=fix-12-null-deref"
	-D "worktree=/srv/agents/w1/acme-widgets" -D "head=9fceb02d0ae598e95dc970b74767f19372d61af8"
	-D "stage=addressing_review" -D "digest=$digest" -D "complete=true" -D "missing=[]"
	-D "doc=$doc" -D "evdata={\"seq\":1$evtail" -D "evtail=$evtail" -D seq=0
	-D "noliveref=$noliveref"
)

# reset empties the tables and seeds one active session (and its run) per
# client, ids 1..clients, so both variants start from the same state.
reset() {
	psql -q -X -v ON_ERROR_STOP=1 -d "$db" >/dev/null <<-SQL
		SET client_min_messages = warning;
		TRUNCATE events, checkpoints, runs, sessions CASCADE;
		INSERT INTO sessions (id, repo, repo_key, role, state, created_at, updated_at,
		    current_run_id, run_seq, event_seq, validity_at)
		SELECT g::text, 'acme/widgets', 'acme/widgets', 'author', 'active', 0, 0, g::text, 1, 2, 0
		FROM generate_series(1, $clients) g;
		INSERT INTO runs (id, session_id, fencing_token, agent, started_at)
		SELECT g::text, g::text, 1, '{}', 0 FROM generate_series(1, $clients) g;
		-- Bound as the documents say, so the daemon's function writes.
		UPDATE sessions SET pr = 34, branch = 'fix-12-null-deref',
		    validity_reason = '$(sed "s/'/''/g" <<<"$noliveref")';
		CHECKPOINT;
	SQL
}

# pg_ticks and per_write: the CPU accounting the daemon's side uses.
# shellcheck source=http.sh
source "$here/http.sh"

# run NAME SCRIPT: one pgbench run; prints the floor line, with the CPU
# per transaction of PostgreSQL and of pgbench (from /usr/bin/time, "-"
# without it).
run() {
	local name=$1 script=$2 out p0 p1 timer=()
	reset
	rm -f "$tmp"/log* "$tmp/time"
	[[ -x /usr/bin/time ]] && timer=(/usr/bin/time -o "$tmp/time" -f '%U %S')
	p0=$(pg_ticks)
	# timeout: pgbench stops itself at -T, this only guards a hung server.
	out=$(cd "$tmp" && timeout $((seconds + 60)) "${timer[@]}" pgbench -n -M prepared -c "$clients" -j "$threads" -T "$seconds" \
		-l --log-prefix="$tmp/log" "${defines[@]}" -f "$here/$script" "$db" 2>&1) || {
		echo "$out" >&2
		echo "pgbench $name failed" >&2
		exit 1
	}
	p1=$(pg_ticks)
	local tps failed n client_us=- written
	tps=$(awk '/^tps = / {print $3; exit}' <<<"$out")
	n=$(awk '/number of transactions actually processed/ {print $NF; exit}' <<<"$out")
	[[ -s $tmp/time ]] && client_us=$(awk -v n="$n" '{printf "%.0f", (n > 0) ? ($1 + $2) * 1e6 / n : 0}' "$tmp/time")
	failed=$(awk '/number of failed transactions/ {print $5; exit}' <<<"$out")
	# Every transaction wrote its checkpoint (the function declines
	# silently otherwise).
	written=$(psql -X -At -d "$db" -c "SELECT count(*) FROM checkpoints")
	if [[ $written != "$n" ]]; then
		echo "pgbench $name: $n transactions, $written checkpoints written" >&2
		exit 1
	fi
	if [[ ${failed:-0} != 0 ]]; then
		echo "$out" >&2
		echo "pgbench $name: $failed failed transactions" >&2
		exit 1
	fi
	# Field 3 of the per-transaction log is the latency in microseconds.
	cat "$tmp"/log* | awk '{print $3}' | sort -n | awk -v name="$name" -v tps="$tps" \
		-v pg_us="$(per_write $((p1 - p0)) "$n")" -v client_us="$client_us" \
		-v c="$clients" -v s="$seconds" -v b="${#doc}" '
		{ v[NR] = $1 }
		END {
			if (NR == 0) { print "no transactions logged" > "/dev/stderr"; exit 1 }
			p50 = v[int(NR * 0.50 + 0.5) > 0 ? int(NR * 0.50 + 0.5) : 1]
			p99 = v[int(NR * 0.99 + 0.5) > 0 ? int(NR * 0.99 + 0.5) : 1]
			printf "floor %s clients=%d seconds=%d doc_bytes=%d tps=%.1f p50_ms=%.2f p99_ms=%.2f pg_us=%s client_us=%s\n", name, c, s, b, tps, p50 / 1000, p99 / 1000, pg_us, client_us
		}'
}

run postgres-tx checkpoint.sql
run postgres-cte checkpoint_cte.sql
run postgres-fn checkpoint_fn.sql
