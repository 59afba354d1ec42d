"""Offline validation of exported manifests against the vendored schemas (tests/fixtures/k8s_schemas,
SOURCES.md): Kubernetes v1.33.0's strict JSON schemas and the LWS v0.10.0 CRD's openAPIV3Schema.

The CRD schema leaves unknown fields to the API server, which drops them (or, with kubectl's
default strict field validation, refuses them); here every object node with `properties` gets
`additionalProperties: false`, so a misspelled field fails offline too. Pod templates inside the
LeaderWorkerSet are also checked against Kubernetes' strict PodTemplateSpec, metadata against
ObjectMeta (the CRD only says `type: object` for them).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import jsonschema
from referencing import Registry, Resource

DIR = Path(__file__).resolve().parents[2] / "fixtures" / "k8s_schemas"
KINDS = {
    ("v1", "ConfigMap"): "configmap-v1",
    ("v1", "Secret"): "secret-v1",
    ("v1", "Service"): "service-v1",
    ("v1", "ServiceAccount"): "serviceaccount-v1",
    ("apps/v1", "Deployment"): "deployment-apps-v1",
    ("rbac.authorization.k8s.io/v1", "Role"): "role-rbac-v1",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "rolebinding-rbac-v1",
}
LWS = ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")


def _load(name: str) -> dict:
    return json.loads((DIR / f"{name}.json").read_text())


@cache
def _registry() -> Registry:
    defs = _load("_definitions")
    return Registry().with_resource(defs["$id"], Resource.from_contents(defs))


@cache
def validator(name: str) -> jsonschema.Validator:
    schema = _load(name)
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema, registry=_registry())


def strict(node: object) -> object:
    """The CRD schema with unknown fields refused wherever it lists the known ones."""
    if isinstance(node, list):
        return [strict(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: strict(v) for k, v in node.items()}
    known = "properties" in out and "additionalProperties" not in out
    if known and not out.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


@cache
def lws_validator() -> jsonschema.Validator:
    return jsonschema.Draft202012Validator(strict(_load("leaderworkerset-v1")))


def errors(doc: dict) -> list[str]:
    """Every schema error of one object, as `kind/name: path: message`."""
    key = (doc.get("apiVersion"), doc.get("kind"))
    where = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
    found: list[tuple[str, jsonschema.ValidationError]] = []
    if key == LWS:
        found += [("", e) for e in lws_validator().iter_errors(doc)]
        found += [
            ("metadata.", e) for e in validator("objectmeta-meta-v1").iter_errors(doc.get("metadata", {}))
        ]
        lwt = doc.get("spec", {}).get("leaderWorkerTemplate", {})
        for tpl in ("leaderTemplate", "workerTemplate"):
            if tpl in lwt:
                pod = validator("podtemplatespec-v1")
                found += [(f"spec.leaderWorkerTemplate.{tpl}.", e) for e in pod.iter_errors(lwt[tpl])]
    elif key in KINDS:
        found += [("", e) for e in validator(KINDS[key]).iter_errors(doc)]
    else:
        return [f"{where}: no vendored schema for {key}"]
    return [f"{where}: {p}{'.'.join(map(str, e.absolute_path))}: {e.message}" for p, e in found]


def k8s_expand(word: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion of command and env (`$$` -> `$`, unknown names kept)."""
    out, i = [], 0
    while i < len(word):
        if word[i] == "$" and i + 1 < len(word):
            nxt = word[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            end = word.find(")", i + 2) if nxt == "(" else -1
            if end != -1:
                name = word[i + 2 : end]
                out.append(env.get(name, word[i : end + 1]))
                i = end + 1
                continue
        out.append(word[i])
        i += 1
    return "".join(out)
