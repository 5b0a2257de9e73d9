#!/bin/sh
# Checkpoint writes over time on PostgreSQL, with autovacuum as the server
# has it (docs/postgresql.md, "Autovacuum"):
#
#   scripts/soak.sh PGDATA DATABASE_URL [SEGMENTS] [WRITES_PER_SEGMENT]
#
# It builds the daemon and checkpointd-loadtest, runs the daemon on
# DATABASE_URL (a scratch database: the load writes real sessions into it)
# and writes SEGMENTS × WRITES_PER_SEGMENT checkpoints (default 10 ×
# 100000) with 16 writers, each segment on 16 new sessions. After each
# segment it prints the writes/s, the server's CPU per write (every process
# of the server whose data directory is PGDATA: it must run on this host),
# and the sessions table's dead rows, HOT share and autovacuum runs. It
# needs curl and psql.
set -eu
pgdata=$1 url=$2 segments=${3:-10} writes=${4:-100000}
work=$(mktemp -d) daemon=
trap '[ -n "$daemon" ] && kill "$daemon" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
go build -o "$work/checkpointd" ./cmd/checkpointd
go build -o "$work/loadtest" ./cmd/checkpointd-loadtest
port=$((20000 + $$ % 20000))
"$work/checkpointd" serve --listen "127.0.0.1:$port" --data-dir "$work" --database-url "$url" \
	--log-level warn > "$work/daemon.log" 2>&1 &
daemon=$!
until curl -fs "http://127.0.0.1:$port/readyz" > /dev/null 2>&1; do
	kill -0 "$daemon" || { cat "$work/daemon.log"; exit 1; }
	sleep 0.2
done
token=$(cat "$work/operator.token")

# server_ticks: CPU clock ticks of the server so far: the postmaster's own
# and its reaped children's (fields 14-17 of its stat), and its live
# children's own (14-15).
server_ticks() {
	pm=$(head -1 "$pgdata/postmaster.pid")
	t=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$pm/stat")
	for c in $(cat "/proc/$pm/task/$pm/children"); do
		t=$((t + $(awk '{print $14 + $15}' "/proc/$c/stat" 2>/dev/null || echo 0)))
	done
	echo "$t"
}
stats() {
	psql -X -A -t -F ' ' "$url" -c "SELECT n_live_tup, n_dead_tup,
  CASE WHEN n_tup_upd = 0 THEN 0 ELSE round(100.0 * n_tup_hot_upd / n_tup_upd, 1) END, autovacuum_count
FROM pg_stat_user_tables WHERE relname = 'sessions'"
}
hz=$(getconf CLK_TCK)
echo "| segment | writes | writes/s | server CPU ms/write | sessions live | dead | HOT % | autovacuums |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
for i in $(seq 1 "$segments"); do
	before=$(server_ticks)
	out=$("$work/loadtest" --url "http://127.0.0.1:$port" --token "$token" --clients 16 \
		--duration 5m --max-requests "$writes" --repo "soak/seg-$i")
	after=$(server_ticks)
	rate=$(echo "$out" | awk '/^writes\/s:/ {print $2}')
	ok=$(echo "$out" | awk '/^succeeded:/ {print $2}')
	[ "$ok" -gt 0 ] || { echo "$out"; exit 1; }
	sleep 11 # an idle backend's statistics reach the server within 10 s
	set -- $(stats)
	cpu=$(awk -v t=$((after - before)) -v hz="$hz" -v n="$ok" 'BEGIN {printf "%.2f", 1000 * t / hz / n}')
	done_writes=$((${done_writes:-0} + ok))
	echo "| $i | $done_writes | $rate | $cpu | $1 | $2 | $3 | $4 |"
done
