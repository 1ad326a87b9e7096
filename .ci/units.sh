#!/usr/bin/env bash
# Checks the shipped systemd units (packaging/systemd): `systemd-analyze verify` on each, with
# ExecStart pointing at the warden binary given as $1 (the units name /usr/local/bin/warden),
# and `systemd-analyze security --offline` must rate each at most MAX_EXPOSURE (printed).
set -euo pipefail
cd "$(dirname "$0")/.."
binary="${1:?usage: units.sh PATH-TO-WARDEN}"
max_exposure="${MAX_EXPOSURE:-4.0}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for unit in packaging/systemd/*.service; do
  name="$(basename "$unit")"
  sed "s|/usr/local/bin/warden|$binary|" "$unit" > "$work/$name"
  systemd-analyze verify "$work/$name"
  line="$(systemd-analyze security --offline=true "$work/$name" 2>&1 | grep 'Overall exposure level')"
  score="$(sed -E 's/.*: ([0-9.]+) .*/\1/' <<<"$line")"
  echo "$name: verified; exposure $score (at most $max_exposure)"
  awk -v s="$score" -v m="$max_exposure" 'BEGIN { exit !(s <= m) }' || {
    echo "$name: exposure $score is above $max_exposure" >&2
    exit 1
  }
done
