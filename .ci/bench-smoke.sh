#!/usr/bin/env bash
# Runs every benchmark's smoke mode (README's "Benchmarks"): one small round of every part, each
# answer checked, so a benchmark cannot rot unnoticed. A wrong answer, a crash or a hang fails;
# a time never does. References a machine may lack (wrk, rg, bwrap, runsc, pgbench) are skipped
# by the benchmarks with a line saying so; claim_bench measures Postgres too when
# WARDEN_TEST_POSTGRES_URL is set.
#
# Expects the debug examples (`cargo test --workspace` builds them) and the warden binary
# (`cargo build -p warden-cli`) under $CARGO_TARGET_DIR (default: target). Stops at the first
# failure and names it.
set -euo pipefail
cd "$(dirname "$0")/.."

debug="${CARGO_TARGET_DIR:-target}/debug"
examples="$debug/examples"
warden="$debug/warden"
# A hung benchmark fails instead of holding CI.
limit="${WARDEN_BENCH_SMOKE_TIMEOUT:-300}"

benches=(
  "step_bench --smoke"
  "snapshot_bench --smoke"
  "worktree_bench --smoke"
  "search_bench --smoke"
  "candidate_bench --smoke"
  "sandbox_bench --smoke"
  "k8s_bench --smoke"
  "mcp_bench --smoke"
  "claim_bench --smoke"
  "api_bench --smoke"
  "console_bench --smoke"
  "journal_page_bench --smoke"
  "serve_bench --smoke --warden $warden"
  "checks_bench --smoke --warden $warden"
  "economy_bench --smoke --warden $warden"
)

for missing in "$warden" $(printf '%s\n' "${benches[@]}" | awk -v dir="$examples" '{print dir "/" $1}'); do
  [ -x "$missing" ] || { echo "bench-smoke: $missing is not built" >&2; exit 1; }
done

total_started=$SECONDS
for bench in "${benches[@]}"; do
  read -r -a argv <<<"$bench"
  name="${argv[0]}"
  echo "== $bench"
  started=$SECONDS
  status=0
  timeout --kill-after=10 "$limit" "$examples/$name" "${argv[@]:1}" || status=$?
  if [ "$status" -ne 0 ]; then
    echo "bench-smoke: $name --smoke FAILED (exit $status$([ "$status" -eq 124 ] && echo ", timed out after ${limit} s"))" >&2
    exit 1
  fi
  echo "-- $name: ok in $((SECONDS - started)) s"
done
echo "bench-smoke: ${#benches[@]} benchmarks ok in $((SECONDS - total_started)) s"
