# Sourced by compare.sh and scripts/peer/compare-langgraph.sh: the daemon's
# side of a comparison, the same in both. The caller sets tmp (holding the
# built checkpointd), clients and seconds, and daemon_pid, which its EXIT
# trap stops.

# field LINE KEY: the value of key=value in a floor line, or of "key: value"
# in loadtest output.
field() { tr ' ' '\n' <<<"$1" | awk -F= -v k="$2" '$1 == k {print $2; exit}'; }
lt() { awk -F': *' -v k="$2" '$1 == k {sub(/ms$/, "", $2); split($2, a, " "); print a[1]; exit}' <<<"$1"; }

# http NAME DATA_DIR [DATABASE_URL [RESULT_FILE]]: serve, create a token,
# load, stop. It runs in the caller's shell, never in $(…), so the EXIT trap
# knows the daemon's pid; its result line is appended to RESULT_FILE
# (default $tmp/NAME.result).
http() {
	local name=$1 dir=$2 url=${3:-} result=${4:-$tmp/$1.result} log=$tmp/$1.$RANDOM.log addr= token out
	mkdir -p "$dir"
	CHECKPOINTD_DATA_DIR=$dir CHECKPOINTD_DATABASE_URL=$url \
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
	if ! out=$("$tmp/checkpointd" loadtest --url "http://$addr" --token "$token" --clients "$clients" \
		--duration "${seconds}s" ${LOADTEST_FLAGS:-}); then
		echo "$out" >&2
		grep -v 'level=INFO' "$log" | tail -n 20 >&2
		echo "$name: the load test failed" >&2
		exit 1
	fi
	kill -TERM "$daemon_pid"
	wait "$daemon_pid" || true
	daemon_pid=
	echo "$out" | sed "s/^/  $name | /" >&2
	printf 'http %s writes_s=%s p50_ms=%s p99_ms=%s\n' "$name" "$(lt "$out" 'writes/s')" \
		"$(lt "$out" 'latency p50')" "$(lt "$out" 'latency p99')" >>"$result"
}
