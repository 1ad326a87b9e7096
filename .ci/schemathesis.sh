#!/usr/bin/env bash
# Property-based API testing: starts the real `warden serve` (SQLite store, faux model) on a free
# port with a registered repository, then lets schemathesis (PyPI) generate requests from
# /openapi.json — valid and invalid — and fails on any 5xx, any status code or content type the
# document does not declare, and any response body that does not match its declared schema.
# `GET /v1/events` is excluded: it is a stream that never ends by design (tests/suite/events.rs
# covers it); per-task streams end with their task.
# Usage: bash .ci/schemathesis.sh [path/to/warden]   (default: $CARGO_TARGET_DIR/debug/warden)
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "schemathesis.sh: $*" >&2; }

target="${CARGO_TARGET_DIR:-target}"
warden="${1:-$target/debug/warden}"
[ -x "$warden" ] || { log "no warden binary at $warden (cargo build -p warden-cli first)"; exit 2; }

# The venv holds exactly the versions .ci/schemathesis-requirements.txt pins, dependencies included:
# pinning schemathesis alone let pip pick up whatever hypothesis and jsonschema_rs were newest on
# the day. A venv whose `pip freeze` differs from the file (left by an earlier run, or by an older
# version of this script, with other versions) is emptied and installed again.
venv="${SCHEMATHESIS_VENV:-/var/cache/warden-ci/schemathesis-venv}"
requirements=".ci/schemathesis-requirements.txt"
pinned="$(grep -Ev '^[[:space:]]*(#|$)' "$requirements" | LC_ALL=C sort)"
installed() { "$venv/bin/python" -m pip freeze 2>/dev/null | LC_ALL=C sort; }
if [ ! -x "$venv/bin/schemathesis" ] || [ "$(installed)" != "$pinned" ]; then
  # `venv --clear` empties the directory: only ever one that is a venv already, or empty, or absent.
  if [ -e "$venv" ] && [ ! -f "$venv/pyvenv.cfg" ] && [ -n "$(ls -A "$venv" 2>/dev/null)" ]; then
    log "$venv exists and is not a venv; not touching it (set SCHEMATHESIS_VENV elsewhere)"
    exit 2
  fi
  log "installing the pinned schemathesis ($requirements) into $venv"
  if ! python3 -m venv --clear "$venv" >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >&2
    apt-get install -y -q --no-install-recommends python3-venv python3-pip >&2
    python3 -m venv --clear "$venv"
  fi
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$requirements"
  if [ "$(installed)" != "$pinned" ]; then
    log "the venv does not match $requirements after installing it:"
    diff <(echo "$pinned") <(installed) >&2 || true
    exit 1
  fi
fi

work="$(mktemp -d)"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# A repository to ask about.
git init -q "$work/repo"
printf 'pub fn answer() -> u32 {\n    42\n}\n' >"$work/repo/lib.rs"
git -C "$work/repo" -c user.name=ci -c user.email=ci@example.com add lib.rs
git -C "$work/repo" -c user.name=ci -c user.email=ci@example.com commit -q -m initial

port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
admin="schemathesis-admin-token-0123456789"
operator="schemathesis-operator-token-0123456789"
mkdir -p "$work/home"
# Generous rate limits: schemathesis sends thousands of requests from one token.
cat >"$work/home/warden.toml" <<'EOF'
[serve]
workers = 1
rate_limit_per_minute = 1000000
rate_limit_burst = 100000
EOF

WARDEN_HOME="$work/home" WARDEN_MODEL=faux WARDEN_LISTEN="127.0.0.1:$port" \
  WARDEN_API_TOKENS="root:admin:$admin,ops:operator:$operator" \
  "$warden" serve >"$work/serve.log" 2>&1 &
server_pid=$!
base="http://127.0.0.1:$port"
for _ in $(seq 1 100); do
  curl -fsS "$base/healthz" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fsS "$base/healthz" >/dev/null || { cat "$work/serve.log" >&2; exit 1; }
curl -fsS -X POST "$base/v1/repos" -H "Authorization: Bearer $admin" \
  -H 'Content-Type: application/json' \
  -d "{\"name\":\"app\",\"source\":\"$work/repo\"}" >/dev/null

# One worker thread: CPython 3.11 before 3.11.8 (CI's python3 is 3.11.7) and 3.12 before 3.12.2 keep
# the AST constructor's recursion counter in state all threads share (CPython gh-106905), so two
# threads in `ast.parse` at once - Hypothesis parses source to describe lambdas in strategy reprs -
# fail at random with "SystemError: AST constructor recursion depth mismatch", reported as an error
# on an operation. `--workers 2` failed 6 of 9 runs that way, whatever the hypothesis version; one
# worker runs the same operations, phases, checks and examples in about the same time (10-20 s).
# `filter_too_much`: the webhooks take form-encoded bodies described as one string, from which
# Hypothesis must filter its form data; with an unlucky seed it gives up on that operation
# ("Failed Health Check", no request sent, nothing about the server). The operation's examples
# and coverage phases still run.
status=0
"$venv/bin/schemathesis" run "$base/openapi.json" \
  --suppress-health-check filter_too_much \
  --header "Authorization: Bearer $admin" \
  --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance \
  --phases examples,coverage,fuzzing \
  --max-examples "${SCHEMATHESIS_MAX_EXAMPLES:-60}" \
  --workers 1 \
  --request-timeout 10 \
  --generation-database none \
  --exclude-path /v1/events \
  --no-color || status=$?
if [ "$status" -ne 0 ]; then
  log "schemathesis failed; the server log follows"
  tail -n 50 "$work/serve.log" >&2
fi
exit "$status"
