#!/usr/bin/env bash
# compare.sh [SECONDS] — checkpoint writes through the daemon's HTTP API
# against the raw database floor, on both backends, in one run.
#
#   1. PostgreSQL floor: postgres.sh (pgbench, 16 clients, the transaction of
#      store.WriteCheckpoint; plus its one-round-trip CTE variant and the
#      daemon's own one-statement write, for information).
#   2. The daemon on a fresh PostgreSQL database (random loopback port, its
#      own data dir), an agent token from `checkpointd token create`, then
#      `checkpointd-loadtest --clients 16`; the daemon is stopped.
#   3. SQLite floor: sqlite.go (same transaction, same driver and settings).
#   4. The daemon on a fresh SQLite data dir, the same load test.
#
# and prints a table of the ratios against the targets of docs/performance.md.
# Each step runs SECONDS (default 10, at most 300); ROUNDS (default 1, at
# most 5) repeats the four steps and reports each line's median round.
# Everything is on loopback;
# the scratch databases and temp dirs are removed on exit, also on error or
# Ctrl-C.
#
# The daemon is built once and run as a binary instead of `go run`, so the
# compile is not measured and the process we stop is the daemon itself.
#
# Environment: PGHOST/PGPORT/PGUSER (default 127.0.0.1:5432, postgres) as for
# postgres.sh; CLIENTS (default 16); PG_DSN_OPTIONS, extra query parameters
# for the daemon's PostgreSQL URL (e.g. "binary_parameters=yes") to try a
# driver setting without touching code; LOADTEST_FLAGS, extra flags for
# `checkpointd-loadtest` (e.g. "--idempotency-keys"); DAEMON_ENV, extra
# NAME=VALUE settings for the daemon's environment (e.g. "GOGC=800").
set -euo pipefail

seconds=${1:-10}
if ! [[ $seconds =~ ^[0-9]+$ ]] || ((seconds < 1 || seconds > 300)); then
	echo "usage: $0 [SECONDS 1-300]" >&2
	exit 2
fi
clients=${CLIENTS:-16}
export PGHOST=${PGHOST:-127.0.0.1} PGPORT=${PGPORT:-5432} PGUSER=${PGUSER:-postgres}
admin_db=${ADMIN_DB:-postgres}
http_db=checkpointd_compare
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
dsn="postgres://$PGUSER@$PGHOST:$PGPORT/$http_db?sslmode=disable${PG_DSN_OPTIONS:+&$PG_DSN_OPTIONS}"

# The daemon's side (http) and the set-up are shared by both comparisons.
# shellcheck source=http.sh
source "$here/http.sh"
read_rounds
scratch

# Floors and daemon share the machine with whatever else runs on it; the
# load average is printed so a skewed run can be recognised.
load_start=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo '?')
echo "building checkpointd and the SQLite floor…" >&2
(cd "$root" && go build -o "$tmp/checkpointd" ./cmd/checkpointd && go build -o "$tmp/checkpointd-loadtest" ./cmd/checkpointd-loadtest && go build -o "$tmp/sqlite-floor" ./scripts/floor/sqlite.go)


# Each round: the PostgreSQL floor, the daemon on PostgreSQL, the SQLite
# floor, the daemon on SQLite. With ROUNDS > 1 the table shows each line's
# median round, so a noisy moment on a shared machine does not decide a
# ratio alone.
for r in $(seq "$rounds"); do
	echo "round $r/$rounds: PostgreSQL floor (${seconds}s per variant)…" >&2
	out=$(bash "$here/postgres.sh" "$seconds")
	echo "$out" >&2
	echo "$out" >>"$tmp/pg_floor.results"

	echo "round $r/$rounds: daemon on PostgreSQL…" >&2
	psql -q -X -v ON_ERROR_STOP=1 -d "$admin_db" -c "SET client_min_messages = warning" \
		-c "DROP DATABASE IF EXISTS $http_db WITH (FORCE)" -c "CREATE DATABASE $http_db" >/dev/null
	http postgres "$tmp/pg$r" "$dsn" "$tmp/pg_http.results"

	echo "round $r/$rounds: SQLite floor…" >&2
	out=$(cd "$root" && "$tmp/sqlite-floor" -clients "$clients" -duration "${seconds}s" -root "$root")
	echo "$out" >&2
	echo "$out" >>"$tmp/sq_floor.results"

	echo "round $r/$rounds: daemon on SQLite…" >&2
	http sqlite "$tmp/sqlite$r" "" "$tmp/sq_http.results"
done
for v in tx cte fn; do
	grep "^floor postgres-$v " "$tmp/pg_floor.results" >"$tmp/pg_$v.results"
done
pg_tx=$(median "$tmp/pg_tx.results" tps)
pg_cte=$(median "$tmp/pg_cte.results" tps)
pg_fn=$(median "$tmp/pg_fn.results" tps)
pg_http=$(median "$tmp/pg_http.results" writes_s)
sq_floor=$(median "$tmp/sq_floor.results" tps)
sq_http=$(median "$tmp/sq_http.results" writes_s)

# The table: floors, HTTP, and the ratios against the targets.
awk -v pt="$(field "$pg_tx" tps)" -v p50="$(field "$pg_tx" p50_ms)" -v p99="$(field "$pg_tx" p99_ms)" \
	-v ct="$(field "$pg_cte" tps)" -v c50="$(field "$pg_cte" p50_ms)" -v c99="$(field "$pg_cte" p99_ms)" \
	-v ht="$(field "$pg_http" writes_s)" -v h50="$(field "$pg_http" p50_ms)" -v h99="$(field "$pg_http" p99_ms)" \
	-v st="$(field "$sq_floor" tps)" -v s50="$(field "$sq_floor" p50_ms)" -v s99="$(field "$sq_floor" p99_ms)" \
	-v qt="$(field "$sq_http" writes_s)" -v q50="$(field "$sq_http" p50_ms)" -v q99="$(field "$sq_http" p99_ms)" \
	-v ft="$(field "$pg_fn" tps)" -v f50="$(field "$pg_fn" p50_ms)" -v f99="$(field "$pg_fn" p99_ms)" \
	-v tpg="$(field "$pg_tx" pg_us)" -v tcl="$(field "$pg_tx" client_us)" \
	-v cpg="$(field "$pg_cte" pg_us)" -v ccl="$(field "$pg_cte" client_us)" \
	-v fpg="$(field "$pg_fn" pg_us)" -v fcl="$(field "$pg_fn" client_us)" \
	-v hd="$(field "$pg_http" daemon_us)" -v hp="$(field "$pg_http" pg_us)" -v hc="$(field "$pg_http" client_us)" \
	-v qd="$(field "$sq_http" daemon_us)" -v qc="$(field "$sq_http" client_us)" \
	-v c="$clients" -v s="$seconds" -v n="$rounds" -v la0="$load_start" -v la1="$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo '?')" 'BEGIN {
	printf "\n%d clients, %ds each, %d round(s)%s, ~3 KB documents; load average %s at start, %s at end\n\n", c, s, n, (n > 1) ? " (medians)" : "", la0, la1
	printf "%-24s %10s %9s %9s\n", "", "tx|writes/s", "p50 ms", "p99 ms"
	printf "%-24s %10.1f %9.2f %9.2f\n", "postgres floor (5 trips)", pt, p50, p99
	printf "%-24s %10.1f %9.2f %9.2f\n", "postgres floor (CTE)", ct, c50, c99
	printf "%-24s %10.1f %9.2f %9.2f\n", "postgres floor (fn)", ft, f50, f99
	printf "%-24s %10.1f %9.2f %9.2f\n", "postgres HTTP", ht, h50, h99
	printf "%-24s %10.1f %9.2f %9.2f\n", "sqlite floor", st, s50, s99
	printf "%-24s %10.1f %9.2f %9.2f\n\n", "sqlite HTTP", qt, q50, q99
	printf "CPU per write, µs        %10s %9s %9s\n", "daemon", "database", "client"
	printf "%-24s %10s %9s %9s\n", "postgres floor (5 trips)", "-", tpg, tcl
	printf "%-24s %10s %9s %9s\n", "postgres floor (CTE)", "-", cpg, ccl
	printf "%-24s %10s %9s %9s\n", "postgres floor (fn)", "-", fpg, fcl
	printf "%-24s %10s %9s %9s\n", "postgres HTTP", hd, hp, hc
	printf "%-24s %10s %9s %9s\n\n", "sqlite HTTP", qd, "(in it)", qc
	r1 = (pt > 0) ? ht / pt : 0; r2 = (p99 > 0) ? h99 / p99 : 0; r3 = (st > 0) ? qt / st : 0
	r4 = (ct > 0) ? ht / ct : 0
	printf "%-42s %6s %8s  %s\n", "target", "got", "want", ""
	printf "%-42s %5.0f%% %8s  %s\n", "postgres HTTP writes/s / floor tx/s", 100 * r1, ">= 60%", (r1 >= 0.60) ? "met" : "MISSED"
	printf "%-42s %5.2fx %8s  %s\n", "postgres HTTP p99 / floor p99", r2, "<= 2x", (r2 <= 2) ? "met" : "MISSED"
	printf "%-42s %5.0f%% %8s  %s\n", "sqlite HTTP writes/s / floor tx/s", 100 * r3, ">= 70%", (r3 >= 0.70) ? "met" : "MISSED"
	printf "%-42s %5.0f%% %8s\n", "postgres HTTP writes/s / CTE floor", 100 * r4, "(info)"
}'
