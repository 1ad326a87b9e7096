#!/usr/bin/env bash
# The official MCP reference servers from npm (@modelcontextprotocol/server-filesystem and
# server-everything) for the tests of Warden's MCP client: `npm ci` of exactly what
# .ci/mcp-node/package-lock.json pins (dependencies included, install scripts off) into a
# directory of its own. Prints the export line for WARDEN_TEST_MCP_NODE_SERVERS on stdout
# (everything else goes to stderr), so a caller can do: eval "$(bash .ci/mcp-node.sh)".
# The tests mount that directory read-only into the sandbox and run the servers with the
# host's /usr/bin/node, which the sandbox sees.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "mcp-node.sh: $*" >&2; }

prefix="${MCP_NODE_PREFIX:-/var/cache/warden-ci/mcp-node}"
lock=".ci/mcp-node/package-lock.json"
stamp="$prefix/.installed-lock"
if [ ! -f "$stamp" ] || ! cmp -s "$lock" "$stamp"; then
  if ! command -v npm >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >&2
    apt-get install -y -q --no-install-recommends nodejs npm >&2
  fi
  log "installing the pinned MCP reference servers ($lock) into $prefix"
  mkdir -p "$prefix"
  cp .ci/mcp-node/package.json "$lock" "$prefix/"
  (cd "$prefix" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2)
  cp "$lock" "$stamp"
fi
for server in server-filesystem server-everything; do
  test -f "$prefix/node_modules/@modelcontextprotocol/$server/package.json" || {
    log "$server is missing under $prefix"
    exit 1
  }
done
echo "export WARDEN_TEST_MCP_NODE_SERVERS=$prefix"
