# Sourced by compare.sh and scripts/peer/compare-langgraph.sh: the daemon's
# side of a comparison and the set-up around it, the same in both (and by
# postgres.sh, for the CPU accounting). The caller sets clients and
# seconds, calls scratch, and builds checkpointd into $tmp.

# read_rounds: ROUNDS (default 1, at most 5) into $rounds, or exit 2.
read_rounds() {
	rounds=${ROUNDS:-1}
	if ! [[ $rounds =~ ^[1-5]$ ]]; then
		echo "$(basename "$0"): ROUNDS must be 1-5, not $rounds" >&2
		exit 2
	fi
}

# scratch: $tmp, and an EXIT trap that stops the daemon still running
# ($daemon_pid), drops the caller's $http_db (from $admin_db) and removes
# $tmp, also on error or Ctrl-C.
scratch() {
	tmp=$(mktemp -d)
	daemon_pid=
	trap scratch_cleanup EXIT
	trap 'exit 130' INT TERM
}
scratch_cleanup() {
	if [[ -n $daemon_pid ]]; then
		kill -TERM "$daemon_pid" 2>/dev/null || true
		wait "$daemon_pid" 2>/dev/null || true
	fi
	psql -q -X -d "$admin_db" -c "SET client_min_messages = warning" \
		-c "DROP DATABASE IF EXISTS $http_db WITH (FORCE)" >/dev/null 2>&1 || true
	rm -rf "$tmp"
}

# field LINE KEY: the value of key=value in a floor line, or of "key: value"
# in loadtest output.
field() { tr ' ' '\n' <<<"$1" | awk -F= -v k="$2" '$1 == k {print $2; exit}'; }
lt() { awk -F': *' -v k="$2" '$1 == k {sub(/ms$/, "", $2); split($2, a, " "); print a[1]; exit}' <<<"$1"; }

# median FILE KEY: the line of FILE whose KEY is the median (the lower one
# of the middle two for an even count).
median() {
	local k=$2
	awk -v k="$k" '{for (i = 1; i <= NF; i++) {split($i, a, "="); if (a[1] == k) print a[2], NR}}' "$1" |
		sort -n | awk '{v[NR] = $2} END {print v[int((NR + 1) / 2)]}' |
		xargs -I{} sed -n '{}p' "$1"
}

# cpu_ticks PID…: user+system CPU the processes used so far, in clock ticks
# (fields 14 and 15 of /proc/PID/stat; the command name before them is one
# word for the daemon and PostgreSQL). pg_ticks: all of PostgreSQL's
# processes, background ones included (they work for the writes too), and
# those that ended: the postmaster's reaped children (fields 16 and 17).
# It assumes one local server (the oldest postgres process is its
# postmaster); with a remote one the database column reads 0.
cpu_ticks() {
	local p t=0
	for p in "$@"; do
		[[ -r /proc/$p/stat ]] && t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0)))
	done
	echo "$t"
}
pg_ticks() {
	local postmaster live
	postmaster=$(pgrep -o -x postgres || true)
	live=$(cpu_ticks $(pgrep -x postgres || true))
	if [[ -n $postmaster && -r /proc/$postmaster/stat ]]; then
		live=$((live + $(awk '{print $16 + $17}' "/proc/$postmaster/stat")))
	fi
	echo "$live"
}
# per_write TICKS WRITES: µs of CPU per write.
per_write() { awk -v t="$1" -v n="$2" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.0f", (n > 0) ? t * 1e6 / hz / n : 0 }'; }

# http NAME DATA_DIR [DATABASE_URL [RESULT_FILE]]: serve, create a token,
# load, stop. It runs in the caller's shell, never in $(…), so the EXIT trap
# knows the daemon's pid; its result line is appended to RESULT_FILE
# (default $tmp/NAME.result).
http() {
	local name=$1 dir=$2 url=${3:-} result=${4:-$tmp/$1.result} log=$tmp/$1.$RANDOM.log addr= token out
	mkdir -p "$dir"
	# DAEMON_ENV: extra NAME=VALUE words for the daemon's environment only
	# (e.g. GOGC=800), to try a runtime setting without touching code.
	# shellcheck disable=SC2086
	CHECKPOINTD_DATA_DIR=$dir CHECKPOINTD_DATABASE_URL=$url env ${DAEMON_ENV:-} \
		"$tmp/checkpointd" serve --listen 127.0.0.1:0 --log-level info >"$log" 2>&1 &
	daemon_pid=$!
	for _ in $(seq 300); do # up to 30 s for migrations and the listener
		addr=$(sed -n 's/.*msg=serving addr=\([^ ]*\).*/\1/p' "$log" | head -n1)
		[[ -n $addr ]] && break
		kill -0 "$daemon_pid" 2>/dev/null || break
		sleep 0.1
	done
	if [[ -z $addr ]]; then
		cat "$log" >&2
		echo "$name: the daemon did not start" >&2
		exit 1
	fi
	token=$(CHECKPOINTD_DATA_DIR=$dir CHECKPOINTD_DATABASE_URL=$url \
		"$tmp/checkpointd" token create --role agent --name "compare-$name" | tail -n1)
	# CPU of the daemon and of PostgreSQL across the load (PostgreSQL's
	# only when the daemon uses it; the backends of the daemon's pool are
	# alive until it stops), the load generator's from its own report.
	local d0 p0 d1 p1
	d0=$(cpu_ticks "$daemon_pid") p0=$(pg_ticks)
	if ! out=$("$tmp/checkpointd-loadtest" --url "http://$addr" --token "$token" --clients "$clients" \
		--duration "${seconds}s" ${LOADTEST_FLAGS:-}); then
		echo "$out" >&2
		grep -v 'level=INFO' "$log" | tail -n 20 >&2
		echo "$name: the load test failed" >&2
		exit 1
	fi
	d1=$(cpu_ticks "$daemon_pid") p1=$(pg_ticks)
	kill -TERM "$daemon_pid"
	wait "$daemon_pid" || true
	daemon_pid=
	echo "$out" | sed "s/^/  $name | /" >&2
	local n pg_us=-
	n=$(lt "$out" succeeded)
	[[ -n $url ]] && pg_us=$(per_write $((p1 - p0)) "$n")
	printf 'http %s writes_s=%s p50_ms=%s p99_ms=%s daemon_us=%s pg_us=%s client_us=%s\n' "$name" "$(lt "$out" 'writes/s')" \
		"$(lt "$out" 'latency p50')" "$(lt "$out" 'latency p99')" "$(per_write $((d1 - d0)) "$n")" "$pg_us" \
		"$(awk -F'[ ,]+' '/^client cpu:/ {print $(NF-1); exit}' <<<"$out")" >>"$result"
}
