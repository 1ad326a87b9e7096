#!/usr/bin/env bash
# The official MCP Python SDK for the tests that drive `warden mcp` with its client (and Slack's
# slack_sdk, which signs the Slack tests' requests): a venv holding
# exactly the versions .ci/mcp-requirements.txt pins (dependencies included), built the way
# .ci/schemathesis.sh builds its own. Prints the export line for WARDEN_TEST_MCP_PYTHON on stdout
# (everything else goes to stderr), so a caller can do: eval "$(bash .ci/mcp-python.sh)".
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "mcp-python.sh: $*" >&2; }

venv="${MCP_PYTHON_VENV:-/var/cache/warden-ci/mcp-venv}"
requirements=".ci/mcp-requirements.txt"
pinned="$(grep -Ev '^[[:space:]]*(#|$)' "$requirements" | LC_ALL=C sort)"
installed() { "$venv/bin/python" -m pip freeze 2>/dev/null | LC_ALL=C sort; }
if [ ! -x "$venv/bin/python" ] || [ "$(installed)" != "$pinned" ]; then
  # `venv --clear` empties the directory: only ever one that is a venv already, or empty, or absent.
  if [ -e "$venv" ] && [ ! -f "$venv/pyvenv.cfg" ] && [ -n "$(ls -A "$venv" 2>/dev/null)" ]; then
    log "$venv exists and is not a venv; not touching it (set MCP_PYTHON_VENV elsewhere)"
    exit 2
  fi
  log "installing the pinned MCP SDK ($requirements) into $venv"
  if ! python3 -m venv --clear "$venv" >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >&2
    apt-get install -y -q --no-install-recommends python3-venv python3-pip >&2
    python3 -m venv --clear "$venv" >&2
  fi
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$requirements" >&2
  if [ "$(installed)" != "$pinned" ]; then
    log "the venv does not match $requirements after installing it:"
    diff <(echo "$pinned") <(installed) >&2 || true
    exit 1
  fi
fi
"$venv/bin/python" -c 'import mcp, slack_sdk' >&2
echo "export WARDEN_TEST_MCP_PYTHON=$venv/bin/python"
