#!/usr/bin/env bash
# axe-core, Deque's accessibility engine (`axe-core` on npm), for the web console's browser
# tests (crates/cli/tests/suite/web_console.rs inject its axe.min.js into each page over
# WebDriver and require zero violations): `npm ci` of exactly what .ci/axe-core/package-lock.json
# pins (no dependencies, install scripts off) into a directory reused between runs and
# installed again when the pin changes. Prints the export line for WARDEN_TEST_AXE (the path of
# axe.min.js) on stdout (everything else goes to stderr), so a caller can do:
# eval "$(bash .ci/axe-core.sh)".
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "axe-core.sh: $*" >&2; }

dir="${AXE_CORE_DIR:-/var/cache/warden-ci/axe-core}"
pins=".ci/axe-core"
script="$dir/node_modules/axe-core/axe.min.js"
if ! cmp -s "$pins/package-lock.json" "$dir/package-lock.json" || [ ! -f "$script" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >&2
    apt-get install -y -q --no-install-recommends nodejs npm >&2
  fi
  log "installing $(grep -o '"axe-core": *"[^"]*"' "$pins/package.json") into $dir"
  mkdir -p "$dir"
  cp "$pins/package.json" "$pins/package-lock.json" "$dir/"
  # `npm ci` installs exactly the lock (and removes whatever node_modules held before).
  npm ci --prefix "$dir" --no-audit --no-fund --ignore-scripts >&2
fi
want="$(grep -o '"axe-core": *"[^"]*"' "$pins/package.json" | sed 's/.*: *"\(.*\)"/\1/')"
have="$(node -p 'require(process.argv[1]).version' "$dir/node_modules/axe-core/package.json" 2>/dev/null || true)"
if [ "$have" != "$want" ] || [ ! -f "$script" ]; then
  log "$dir holds axe-core '${have}', not the pinned $want (or no axe.min.js)"
  exit 1
fi
echo "export WARDEN_TEST_AXE=$script"
