#!/usr/bin/env python3
"""Validates a YAML stream of Kubernetes manifests (what `warden k8s render` prints).

Built-in kinds go to `kubernetes-validate --strict` (their published schemas, unknown fields
refused). The agent-sandbox kinds are checked against the `openAPIV3Schema` of the released CRDs,
kept as fixtures in crates/kubernetes/tests/fixtures/crds/ (see the README there), with unknown
fields refused: every object schema that lists its properties and does not preserve unknown
fields gets `additionalProperties: false`, as the API server's structural pruning would drop
them silently. Metadata is checked the way the API server would (a DNS label name of at most 63
characters for the namespaced custom objects, string labels).

usage: validate-k8s.py KUBERNETES_VALIDATE FILE
"""

import copy
import json
import pathlib
import re
import subprocess
import sys
import tempfile

import jsonschema
import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
CRDS = ROOT / "crates/kubernetes/tests/fixtures/crds"
CUSTOM_GROUPS = ("agents.x-k8s.io/", "extensions.agents.x-k8s.io/")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def closed(schema):
    """The schema with unknown fields refused at every level that lists its fields."""
    schema = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, dict):
            if (
                node.get("type") == "object"
                and "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    # int-or-string: JSON Schema has no such type; the CRDs spell it as anyOf already.
    return schema


def load_crds():
    crds = {}
    for path in sorted(CRDS.glob("*.json")):
        crd = json.loads(path.read_text())
        key = (f"{crd['group']}/{crd['version']}", crd["kind"])
        crds[key] = closed(crd["openAPIV3Schema"])
    return crds


def check_metadata(doc, where):
    meta = doc.get("metadata") or {}
    name = meta.get("name", "")
    if not DNS_LABEL.match(name) or len(name) > 63:
        sys.exit(f"{where}: metadata.name {name!r} is not a DNS label of at most 63 characters")
    if not meta.get("namespace"):
        sys.exit(f"{where}: a namespaced custom object needs metadata.namespace")
    allowed = {"name", "namespace", "labels", "annotations"}
    extra = set(meta) - allowed
    if extra:
        sys.exit(f"{where}: unexpected metadata fields {sorted(extra)}")
    for field in ("labels", "annotations"):
        for key, value in (meta.get(field) or {}).items():
            if not isinstance(value, str):
                sys.exit(f"{where}: metadata.{field}.{key} is not a string")


def main():
    validator_bin, path = sys.argv[1], sys.argv[2]
    docs = [d for d in yaml.safe_load_all(open(path)) if d is not None]
    if not docs:
        sys.exit(f"{path}: no manifests")
    crds = load_crds()
    builtin = []
    for index, doc in enumerate(docs):
        where = f"{path} document {index + 1} ({doc.get('kind')} {doc.get('metadata', {}).get('name')})"
        api = doc.get("apiVersion", "")
        if api.startswith(CUSTOM_GROUPS):
            schema = crds.get((api, doc.get("kind")))
            if schema is None:
                sys.exit(f"{where}: no CRD fixture for {api} {doc.get('kind')}")
            check_metadata(doc, where)
            body = {k: v for k, v in doc.items() if k != "metadata"}
            schema = dict(schema)
            schema["properties"] = {
                k: v for k, v in schema["properties"].items() if k != "metadata"
            }
            errors = sorted(
                jsonschema.Draft7Validator(schema).iter_errors(body), key=lambda e: list(e.path)
            )
            if errors:
                for error in errors:
                    print(f"{where}: {'/'.join(map(str, error.path))}: {error.message}", file=sys.stderr)
                sys.exit(1)
            print(f"{where}: valid against the {doc['kind']} CRD (unknown fields refused)")
            pod_template = (doc.get("spec") or {}).get("podTemplate")
            if pod_template:
                # The pod as the controller makes it, for the built-in Pod schema as well.
                builtin.append({
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": doc["metadata"]["name"], "namespace": doc["metadata"]["namespace"],
                                 "labels": pod_template.get("metadata", {}).get("labels", {})},
                    "spec": pod_template["spec"],
                })
        else:
            builtin.append(doc)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as out:
        yaml.safe_dump_all(builtin, out)
    result = subprocess.run([validator_bin, "--strict", "--quiet", out.name])
    pathlib.Path(out.name).unlink()
    if result.returncode != 0:
        sys.exit(f"{path}: built-in kinds refused by kubernetes-validate --strict")
    kinds = ", ".join(d["kind"] for d in builtin)
    print(f"{path}: {kinds}: valid (kubernetes-validate --strict)")


if __name__ == "__main__":
    main()
