"""Vendor the schemas `sparkctl export k8s` is validated against (tests/fixtures/k8s_schemas/).

Inputs, both pinned (tests/fixtures/k8s_schemas/SOURCES.md records them with sha256):
  WHEEL  kubernetes_validate-1.37.0-py3-none-any.whl (`pip download --no-deps kubernetes-validate==1.37.0`):
         its v1.33.0-local-strict JSON schemas (Kubernetes' OpenAPI converted by openapi2jsonschema,
         strict: unknown fields rejected)
  CRD    config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml of kubernetes-sigs/lws at v0.10.0

Writes: the object schemas used, `_definitions.json` cut to the definitions they reach (the
rest of Kubernetes' API is left out: 1.4 MB -> what is used), and the LWS CRD's openAPIV3Schema
as JSON. Run: python3 scripts/vendor_k8s_schemas.py WHEEL CRD
"""

from __future__ import annotations

import hashlib
import json
import sys
import zipfile
from pathlib import Path

import yaml

K8S_VERSION = "v1.33.0-local-strict"
OBJECTS = (
    "configmap-v1",
    "deployment-apps-v1",
    "objectmeta-meta-v1",
    "podtemplatespec-v1",
    "role-rbac-v1",
    "rolebinding-rbac-v1",
    "secret-v1",
    "service-v1",
    "serviceaccount-v1",
)
OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "k8s_schemas"
PREFIX = "/api/_definitions.json#/$defs/"


def _refs(node: object, out: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            out.add(ref.rsplit("/", 1)[-1])
        for v in node.values():
            _refs(v, out)
    elif isinstance(node, list):
        for v in node:
            _refs(v, out)


def closure(defs: dict, roots: list[dict]) -> dict:
    todo: set[str] = set()
    for r in roots:
        _refs(r, todo)
    keep: dict = {}
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        keep[name] = defs[name]
        _refs(defs[name], todo)
    return dict(sorted(keep.items()))


def main(wheel: str, crd: str) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    base = f"kubernetes_validate/kubernetes-json-schema/{K8S_VERSION}/"
    with zipfile.ZipFile(wheel) as z:
        objects = {name: json.loads(z.read(f"{base}{name}.json")) for name in OBJECTS}
        defs_doc = json.loads(z.read(f"{base}_definitions.json"))
    for name, doc in objects.items():
        (OUT / f"{name}.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    defs_doc["$defs"] = closure(defs_doc["$defs"], list(objects.values()))
    (OUT / "_definitions.json").write_text(json.dumps(defs_doc, indent=1, sort_keys=True) + "\n")
    crd_doc = yaml.load(Path(crd).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    (version,) = [v for v in crd_doc["spec"]["versions"] if v["name"] == "v1"]
    schema = version["schema"]["openAPIV3Schema"]
    (OUT / "leaderworkerset-v1.json").write_text(json.dumps(schema, sort_keys=True) + "\n")
    for path in (wheel, crd):
        print(f"{hashlib.sha256(Path(path).read_bytes()).hexdigest()}  {Path(path).name}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
