"""A rank's filtering front on its node (node/front.py, docs/security.md): started right after the
rank's container, before readiness is polled, by every path that starts a rank (`up`, `switch`,
the supervisor's restarts: lifecycle/starting.py). It runs the node program's `front` op as the
node user with the node's python3, tied to the container by its id: it exits when that container
stops or is removed (`down`, a rollback, a replacement), so nothing else stops it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from sparkctl.errors import SparkctlError
from sparkctl.node.pack import node_argv
from sparkctl.planning.build import RankSpec

if TYPE_CHECKING:
    from sparkctl.connectors.base import Connector


def front_config(spec: RankSpec, container_id: str, log_path: str | None) -> dict:
    assert spec.front is not None
    f = spec.front
    return {
        "listen": f.listen,
        "port": f.port,
        "upstream": f.upstream,
        "routes": list(f.routes),
        "fields": list(f.fields),
        "container": container_id,
        "log": log_path,
    }


def start_front(conn: Connector, spec: RankSpec, container_id: str, log_path: str | None = None) -> int:
    """Start the rank's front on its node; its pid there. Raises naming the node and rank."""
    argv = node_argv("front")
    docker_host = getattr(conn, "docker_host", None)  # a local engine that is not the default one
    if docker_host:
        argv = ["env", f"DOCKER_HOST={docker_host}", *argv]
    cfg = json.dumps(front_config(spec, container_id, log_path)) + "\n"
    res = conn.run(argv, timeout=60, input=cfg.encode())
    lines = [line for line in res.stdout.splitlines() if line.startswith("{")]
    try:
        got = json.loads(lines[-1]) if lines else {}
    except ValueError:
        got = {}
    if res.ok and isinstance(got.get("pid"), int):
        return got["pid"]
    assert spec.front is not None
    why = got.get("error") or (res.stderr or res.stdout).strip().splitlines()[-1:] or [f"exit {res.rc}"]
    whose = "the router's" if spec.role == "router" else "the API's"
    raise SparkctlError(
        f"{whose} filtering front could not start: {why if isinstance(why, str) else why[0]}",
        node=spec.node,
        rank=None if spec.role == "router" else spec.rank,  # the router is no rank
        fix=f"free port {spec.front.port} on {spec.node} (the node user needs python3 there, and a port "
        "above 1023 unless it is root), or set engine.front: false (docs/security.md)",
    )
