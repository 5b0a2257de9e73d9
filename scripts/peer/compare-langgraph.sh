#!/usr/bin/env bash
# compare-langgraph.sh [SECONDS] — checkpointd against its peer, back to back
# on the same PostgreSQL, in one run (issue #17):
#
#   1. the daemon on a fresh PostgreSQL database (random loopback port, its
#      own data dir), an agent token, `checkpointd-loadtest --clients 16`, the
#      daemon stopped — exactly as scripts/floor/compare.sh does it;
#   2. scripts/peer/langgraph.sh: LangGraph.js's PostgresSaver.put, 16
#      concurrent threads, the same ~3 KB document, in its own schema;
#
# then the table of both and the ratio checkpointd / LangGraph (goal >= 1.0).
# Each step runs SECONDS (default 10, at most 300). ROUNDS (default 1, at
# most 5) repeats the pair, interleaved (daemon, peer, daemon, peer, …), and
# the table shows each side's median round, so a noisy moment on the shared
# machine does not decide the ratio alone.
#
# Environment: PGHOST/PGPORT/PGUSER (default 127.0.0.1:5432, postgres);
# CLIENTS (default 16, for both sides); PEER_DB, the database the peer's
# schema goes in (default test); PG_DSN_OPTIONS and LOADTEST_FLAGS as for
# compare.sh. The daemon's database checkpointd_peer_compare, the peer's
# schema and the temp dirs are removed on exit, also on error or Ctrl-C.
set -euo pipefail

seconds=${1:-10}
if ! [[ $seconds =~ ^[0-9]+$ ]] || ((seconds < 1 || seconds > 300)); then
	echo "usage: $0 [SECONDS 1-300]" >&2
	exit 2
fi
export CLIENTS=${CLIENTS:-16}
export PGHOST=${PGHOST:-127.0.0.1} PGPORT=${PGPORT:-5432} PGUSER=${PGUSER:-postgres}
admin_db=${ADMIN_DB:-postgres}
http_db=checkpointd_peer_compare
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
dsn="postgres://$PGUSER@$PGHOST:$PGPORT/$http_db?sslmode=disable${PG_DSN_OPTIONS:+&$PG_DSN_OPTIONS}"

# The daemon's side (http) and the set-up are shared by both comparisons.
# shellcheck source=../floor/http.sh
source "$here/../floor/http.sh"
read_rounds
scratch

load_start=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo '?')
echo "building checkpointd…" >&2
(cd "$root" && go build -o "$tmp/checkpointd" ./cmd/checkpointd && go build -o "$tmp/checkpointd-loadtest" ./cmd/checkpointd-loadtest)

clients=$CLIENTS

# daemon ROUND: a fresh database, then compare.sh's http step on it; the
# result line is appended to $tmp/daemon.results.
daemon() {
	psql -q -X -v ON_ERROR_STOP=1 -d "$admin_db" -c "SET client_min_messages = warning" \
		-c "DROP DATABASE IF EXISTS $http_db WITH (FORCE)" -c "CREATE DATABASE $http_db" >/dev/null
	http postgres "$tmp/pg$1" "$dsn" "$tmp/daemon.results"
}

# peer: langgraph.sh (which installs what is missing and drops its schema).
peer() {
	local line p0 p1
	p0=$(pg_ticks)
	line=$(bash "$here/langgraph.sh" "$seconds" 2>"$tmp/peer.err") || {
		cat "$tmp/peer.err" >&2
		echo "peer: langgraph.sh failed" >&2
		exit 1
	}
	p1=$(pg_ticks)
	sed "s/^/  langgraph   | /" "$tmp/peer.err" >&2
	# PostgreSQL's CPU across the run (its set-up included: a few
	# statements) per put.
	echo "$line pg_us=$(per_write $((p1 - p0)) "$(field "$line" puts)")" >>"$tmp/peer.results"
}

for r in $(seq "$rounds"); do
	echo "round $r/$rounds: checkpointd on PostgreSQL (${seconds}s)…" >&2
	daemon "$r"
	echo "round $r/$rounds: LangGraph.js PostgresSaver.put (${seconds}s)…" >&2
	peer
done

d=$(median "$tmp/daemon.results" writes_s)
p=$(median "$tmp/peer.results" puts_s)

awk -v ht="$(field "$d" writes_s)" -v h50="$(field "$d" p50_ms)" -v h99="$(field "$d" p99_ms)" \
	-v lt="$(field "$p" puts_s)" -v l50="$(field "$p" p50_ms)" -v l99="$(field "$p" p99_ms)" \
	-v lcpu="$(field "$p" cpu_us_per_put)" -v lpg="$(field "$p" pg_us)" \
	-v hd="$(field "$d" daemon_us)" -v hp="$(field "$d" pg_us)" -v hc="$(field "$d" client_us)" -v c="$CLIENTS" -v s="$seconds" -v n="$rounds" \
	-v la0="$load_start" -v la1="$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo '?')" 'BEGIN {
	printf "\n%d clients, %ds each, %d round(s)%s, ~3 KB documents; load average %s at start, %s at end\n\n", c, s, n, (n > 1) ? " (medians)" : "", la0, la1
	printf "%-24s %10s %9s %9s\n", "", "writes/s", "p50 ms", "p99 ms"
	printf "%-24s %10.1f %9.2f %9.2f\n", "checkpointd HTTP (pg)", ht, h50, h99
	printf "%-24s %10.1f %9.2f %9.2f\n\n", "langgraph put (pg)", lt, l50, l99
	printf "CPU per write, µs        %10s %9s %9s\n", "in-process", "database", "client"
	printf "%-24s %10s %9s %9s\n", "checkpointd HTTP (pg)", hd, hp, hc
	printf "%-24s %10s %9s %9s\n\n", "langgraph put (pg)", lcpu, lpg, "(in it)"
	r = (lt > 0) ? ht / lt : 0
	printf "%-42s %6s %8s  %s\n", "target", "got", "want", ""
	printf "%-42s %5.2fx %8s  %s\n", "checkpointd writes/s / langgraph puts/s", r, ">= 1.0x", (r >= 1.0) ? "met" : "MISSED"
}'
