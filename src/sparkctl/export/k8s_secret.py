"""The Secret the exported pods mount (`export k8s --secrets`): the plan's secret files with their
values, read the way `up` reads them (the controller's env, or the file on the node) and rendered
by the same code (`secrets.render_files`: the engine's key file holds the API key).

The manifest files never hold a value; this object goes to stdout only, into a pipe
(`| kubectl apply -f -`): not a file, not a process list.
"""

from __future__ import annotations

import base64
import posixpath
from collections.abc import Callable

from sparkctl.connectors.base import Connector
from sparkctl.planning.gateway_container import key_files
from sparkctl.planning.model import Plan, RankSpec
from sparkctl.secrets import render_files, resolve


def _rank_values(spec: RankSpec, connect: Callable[[str], Connector]) -> dict[str, bytes]:
    conn = connect(spec.node) if any(f.ref.file for f in spec.secrets) else None
    out = {posixpath.basename(t): v for t, v in render_files(spec.secrets, conn).items()}
    for f in spec.secrets:
        if f.bind:  # up bind-mounts these from the node; Kubernetes mounts them from the Secret
            out[posixpath.basename(f.target)] = resolve(f.ref, conn).encode()
    return out


def secret_values(plan: Plan, connect: Callable[[str], Connector]) -> dict[str, bytes]:
    """{Secret key (the file's name): content} for the engine ranks, the router and their gateways
    (the sha256 of the key: every gateway of a plan checks the same one)."""
    values: dict[str, bytes] = {}
    for spec in (plan.ranks[0], plan.router):
        if spec is not None and spec.secrets:
            values |= _rank_values(spec, connect)
        if spec is not None and spec.gateway is not None and spec.gateway.key is not None:
            # the files `up` places beside the gateway: every key's hash, and with named keys the
            # names map and the engine's own header (gateway_container.key_files, one renderer)
            files = key_files(spec.gateway)
            conn = connect(spec.node) if any(f.ref.file for f in files) else None
            values |= {posixpath.basename(t): v for t, v in render_files(files, conn).items()}
    return values


def secret_manifest(name: str, namespace: str, labels: dict[str, str], values: dict[str, bytes]) -> dict:
    data = {k: base64.b64encode(v).decode() for k, v in sorted(values.items())}
    meta = {"name": name, "namespace": namespace, "labels": dict(labels)}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "Opaque", "data": data}
