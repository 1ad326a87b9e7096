#!/usr/bin/env bash
# Checks what `warden k8s render` prints ($1: the warden binary) with two settings — the
# defaults, and an egress proxy port with other names — through .ci/validate-k8s.py: the
# built-in kinds (and the template's pod) with kubernetes-validate --strict, the agent-sandbox
# kinds against the released CRDs' openAPIV3Schema (crates/kubernetes/tests/fixtures/crds/)
# with unknown fields refused. The validators come from PyPI into the packaging virtualenv.
set -euo pipefail
cd "$(dirname "$0")/.."
binary="${1:?usage: kubernetes.sh PATH-TO-WARDEN}"
venv="${WARDEN_CI_VENV:-/var/cache/warden-ci/packaging-venv}"
if [ ! -x "$venv/bin/kubernetes-validate" ] || ! "$venv/bin/python3" -c 'import jsonschema, yaml' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q 'kubernetes-validate==1.37.0' 'jsonschema==4.26.0' 'PyYAML==6.0.4'
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
printf '' > "$work/defaults.toml"
cat > "$work/egress.toml" <<'TOML'
[sandbox]
memory_mib = 4096
disk_mib = 2048

[kubernetes]
namespace = "agents"
warden_namespace = "tools"
template = "warden-rust"
warm_pool = "warden-rust"
warm_pool_replicas = 8
egress_proxy_port = 3128
image = "registry.example/warden/rust-sandbox:1.89"
TOML
for settings in defaults egress; do
  WARDEN_HOME="$work/home" "$binary" k8s render --config "$work/$settings.toml" > "$work/$settings.yaml"
  "$venv/bin/python3" .ci/validate-k8s.py "$venv/bin/kubernetes-validate" "$work/$settings.yaml"
done
