#!/usr/bin/env bash
# GitHub's published webhook payloads, `@octokit/webhooks-examples` on npm, for the tests that
# post them to `warden serve` (crates/cli/tests/suite/github_examples.rs): installed with
# `npm ci` from .ci/webhook-examples/ (package.json pins the exact version, package-lock.json
# the integrity hashes) into a directory reused between runs and installed again when the pin
# changes. Prints the export line for WARDEN_TEST_WEBHOOK_EXAMPLES (the package's
# api.github.com/index.json) on stdout (everything else goes to stderr), so a caller can do:
# eval "$(bash .ci/webhook-examples.sh)".
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "webhook-examples.sh: $*" >&2; }

dir="${WEBHOOK_EXAMPLES_DIR:-/var/cache/warden-ci/webhook-examples}"
pins=".ci/webhook-examples"
package="$dir/node_modules/@octokit/webhooks-examples"
index="$package/api.github.com/index.json"
if ! cmp -s "$pins/package-lock.json" "$dir/package-lock.json" || [ ! -f "$index" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >&2
    apt-get install -y -q --no-install-recommends npm >&2
  fi
  log "installing $(grep -o '"@octokit/webhooks-examples": *"[^"]*"' "$pins/package.json") into $dir"
  mkdir -p "$dir"
  cp "$pins/package.json" "$pins/package-lock.json" "$dir/"
  # `npm ci` installs exactly the lock (and removes whatever node_modules held before).
  npm ci --prefix "$dir" --no-audit --no-fund --ignore-scripts >&2
fi
want="$(grep -o '"@octokit/webhooks-examples": *"[^"]*"' "$pins/package.json" | sed 's/.*: *"\(.*\)"/\1/')"
have="$(node -p 'require(process.argv[1]).version' "$package/package.json" 2>/dev/null || true)"
if [ "$have" != "$want" ] || [ ! -f "$index" ]; then
  log "$package holds version '${have}', not the pinned $want (or no api.github.com/index.json)"
  exit 1
fi
echo "export WARDEN_TEST_WEBHOOK_EXAMPLES=$index"
