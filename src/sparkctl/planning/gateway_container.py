"""The gateway's container, as a RankSpec the runtime starts like any other (planning/gateway.py
renders its config): one per gateway of the plan, beside the rank or router whose API it serves,
named after it (gateway_container_name) and removed whenever that container is.

Least privilege like every container: no capability (the port is above 1023), no new privileges,
the node user's uid:gid, a read-only root, bounded pids and open files. Its two files (the config
and the key hashes) are placed on the node's tmpfs with the secrets and mounted read-only.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict

from sparkctl.planning.gateway import (
    CONFIG_PATH,
    KEYS_PATH,
    NAMES_PATH,
    OPERATOR,
    UPSTREAM_PATH,
    GatewaySpec,
    gateway_container_name,
    haproxy_config,
)
from sparkctl.planning.gateway_owner import OWNER_PATH, owner_lua
from sparkctl.planning.hardening import RunOptions
from sparkctl.planning.model import LABEL_PREFIX, Plan, RankSpec
from sparkctl.secrets import SecretFile

ROLE = "gateway"
PIDS = 256


def gateway_options(spec: GatewaySpec) -> RunOptions:
    nofile = 4 * spec.bounds.max_connections + 64  # two sockets per proxied connection, and headroom
    return RunOptions(
        shm_size=None,
        gpus=None,
        pids_limit=PIDS,
        user="node",
        read_only=True,
        ulimits={"nofile": nofile},
    )


def gateway_container(served: RankSpec, engine_uid: int | None = None) -> RankSpec:
    """The container of `served.gateway` (the rank or router whose API it takes). `engine_uid`
    (known at start: the node user's uid for `user: node`): requests pass only while that uid owns
    the upstream port (planning/gateway_owner.py); None leaves the check out (plan-time views)."""
    spec = served.gateway
    assert spec is not None
    config = haproxy_config(spec, engine_uid)
    files = {CONFIG_PATH: config}
    if engine_uid is not None:
        files[OWNER_PATH] = owner_lua(spec.upstream_port, engine_uid)
    secrets = key_files(spec)
    options = gateway_options(spec)
    # Not the uid: it follows from the served container's user, which that container's hash holds,
    # and reconcile, which reads no node, must get the same hash as the start did.
    material = {
        "image": spec.image,
        "config": haproxy_config(spec),
        "key": repr(spec.key),
        "named": [repr(k) for k in spec.named],
        "options": asdict(options),
    }
    digest = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:12]
    labels = {**served.labels, f"{LABEL_PREFIX}role": ROLE, f"{LABEL_PREFIX}config_hash": digest}
    return RankSpec(
        rank=served.rank,
        node=served.node,
        container_name=gateway_container_name(served.container_name),
        image=spec.image,
        argv=["haproxy", "-db", "-f", CONFIG_PATH],
        env={},
        mounts=[],
        options=options,
        labels=labels,
        gpus=0,
        secrets=secrets,
        group=served.group,
        node_rank=served.node_rank,
        role=ROLE,
        files=files,
    )


def key_files(spec: GatewaySpec) -> list[SecretFile]:
    """The key hashes the gateway checks; with named keys also each hash's name and the engine's
    own header, which it sends in a client's place (the one raw key, as the engine's key file)."""
    if spec.key is None:
        return []
    files = [SecretFile(KEYS_PATH, spec.key, hashed=True)]
    files += [SecretFile(KEYS_PATH, k.ref, hashed=True) for k in spec.named]
    if spec.named:
        files.append(SecretFile(NAMES_PATH, spec.key, line="{hash} " + OPERATOR))
        files += [SecretFile(NAMES_PATH, k.ref, line="{hash} " + k.name) for k in spec.named]
        files.append(SecretFile(UPSTREAM_PATH, spec.key, line="engine Bearer {value}"))
    return files


def plan_gateways(plan: Plan) -> list[GatewaySpec]:
    """Every gateway of the plan: the router's, and each group's rank 0."""
    ranks = [*([plan.router] if plan.router is not None else []), *plan.ranks]
    return [r.gateway for r in ranks if r.gateway is not None]
