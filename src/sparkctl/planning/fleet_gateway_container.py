"""The fleet gateway's container (planning/fleet_gateway.py renders its files), as a RankSpec the
runtime starts like any other: one per fleet, named after the cluster, with the same least
privilege as a service's gateway (gateway_options). Its config hash covers the image, every file
and the keys' references, so a changed fleet (a service, a port, a key, a bound) replaces it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict

from sparkctl.planning.fleet_gateway import FleetGatewaySpec, fleet_files, fleet_key_files
from sparkctl.planning.gateway import CONFIG_PATH
from sparkctl.planning.gateway_container import gateway_options
from sparkctl.planning.model import LABEL_PREFIX, RankSpec

ROLE = "fleet-gateway"


def fleet_gateway_name(cluster: str) -> str:
    return f"sparkctl-{cluster}-gateway"


def fleet_gateway_container(spec: FleetGatewaySpec, cluster: str, labels: dict[str, str]) -> RankSpec:
    """The container of the fleet's one endpoint on `spec.node`; `labels`: the cluster's own."""
    files = fleet_files(spec)
    secrets = fleet_key_files(spec)
    options = gateway_options(spec)  # type: ignore[arg-type]  # reads .bounds only
    material = {
        "image": spec.image,
        "files": files,
        "keys": [repr(f) for f in secrets],
        "options": asdict(options),
    }
    digest = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:12]
    return RankSpec(
        rank=0,
        node=spec.node,
        container_name=fleet_gateway_name(cluster),
        image=spec.image,
        argv=["haproxy", "-db", "-f", CONFIG_PATH],
        env={},
        mounts=[],
        options=options,
        labels={**labels, f"{LABEL_PREFIX}role": ROLE, f"{LABEL_PREFIX}config_hash": digest},
        gpus=0,
        secrets=secrets,
        group=0,
        node_rank=0,
        role=ROLE,
        files=files,
    )
