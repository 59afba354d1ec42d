"""The fleet's gateway on its node: started (or replaced when its config changed) by every `up`
of a fleet's service, removed by `down` of the whole fleet (docs/fleet.md "One endpoint").

It does not depend on which services run: it routes to every service's address and reports the
ones whose gateway does not answer /health as not loaded, so starting or stopping one service
never restarts it.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from sparkctl.cluster_http import Failure, fetch
from sparkctl.connectors.pool import NodePool
from sparkctl.errors import SparkctlError
from sparkctl.lifecycle.addresses import node_addresses
from sparkctl.planning.build import build_plan
from sparkctl.planning.fleet_endpoint import fleet_gateway_spec, fleet_url
from sparkctl.planning.fleet_gateway import HEALTH_ROUTE, FleetGatewaySpec
from sparkctl.planning.fleet_gateway_container import fleet_gateway_container
from sparkctl.planning.fleet_view import service_views
from sparkctl.planning.model import LABEL_PREFIX, Plan, PlanFacts, RankSpec
from sparkctl.profile.schema import Profile
from sparkctl.runtime import containers
from sparkctl.runtime.secret_files import seal

ANSWER_WAIT_S = 60.0  # HAProxy listens in well under a second; a loaded node gets room
ANSWER_POLL_S = 0.2


@dataclass(frozen=True)
class FleetGateway:
    spec: FleetGatewaySpec
    container: RankSpec
    url: str
    action: str = "planned"  # started | replaced | kept | planned

    def to_json(self) -> dict:
        return {
            "node": self.spec.node,
            "url": f"{self.url}/v1",
            "container": self.container.container_name,
            "action": self.action,
            "services": {
                r.service: {"names": list(r.names), "on_demand": r.on_demand} for r in self.spec.routes
            },
        }


def planned_gateway(profile: Profile, facts: PlanFacts | None = None) -> FleetGateway:
    """The fleet gateway over every mode of every service: which ones run does not change it."""
    views = service_views(profile)
    plans: dict[str, list[Plan]] = {n: [build_plan(v, m, facts) for m in v.modes] for n, v in views.items()}
    spec = fleet_gateway_spec(profile, views, plans, facts)
    labels = {f"{LABEL_PREFIX}cluster": profile.cluster}
    return FleetGateway(
        spec, fleet_gateway_container(spec, profile.cluster, labels), fleet_url(profile, spec)
    )


def ensure_gateway(profile: Profile, pool: NodePool) -> FleetGateway:
    """Start the fleet gateway, or replace it when its config hash changed; keep it otherwise."""
    nodes = sorted(
        {n for view in service_views(profile).values() for m in view.modes.values() for n in m.nodes}
    )
    facts = PlanFacts(addresses=node_addresses(profile, pool, nodes))
    gw = planned_gateway(profile, facts)
    spec = gw.container
    conn = pool.get(spec.node)
    now = containers.inspect(conn, spec.container_name)
    want = spec.labels[f"{LABEL_PREFIX}config_hash"]
    if now is not None and now.running and now.config_hash == want:
        return FleetGateway(gw.spec, spec, gw.url, "kept")
    containers.remove(conn, spec.container_name, grace=None)
    containers.start_rank(conn, spec, seal(spec, conn).tar)

    def running() -> bool:
        info = containers.inspect(conn, spec.container_name)
        return info is not None and info.running

    wait_answering(
        gw.url + HEALTH_ROUTE,
        running,
        lambda: containers.tail_logs(conn, spec.container_name, 20),
        spec.node,
        f"the fleet gateway {spec.container_name} ({gw.url})",
    )
    return FleetGateway(gw.spec, spec, gw.url, "replaced" if now is not None else "started")


def wait_answering(
    url: str,
    running: Callable[[], bool],
    logs: Callable[[], list[str]],
    node: str,
    what: str,
    wait_s: float = ANSWER_WAIT_S,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Until the gateway answers its keyless /health: `up` prints the endpoint only once a client
    can connect (a container that runs is not yet a socket that listens). Its exit ends the wait
    with its own last lines."""
    deadline = clock() + wait_s

    def no_answer(f: Failure) -> Exception:
        return OSError(f.detail if f.code is None else f"HTTP {f.code}")

    last = "no answer yet"
    while True:
        try:
            fetch(urllib.request.Request(url), 2.0, no_answer, limit=4096)
            return
        except OSError as exc:
            last = str(exc)
        if not running():
            tail = "\n".join(logs()[-20:])
            raise SparkctlError(
                f"{what} exited before it answered ({last})" + (f"\n{tail}" if tail else ""),
                fix="its lines above say why; `sparkctl preflight` checks the gateway image and port",
                node=node,
            )
        if clock() >= deadline:
            raise SparkctlError(
                f"{what} runs but did not answer /health within {wait_s:.0f} s ({last})",
                fix="the controller must reach the gateway's node and port: check a firewall"
                " or the gateway's `node:`/`port:`; `sparkctl logs` shows its lines",
                node=node,
            )
        time.sleep(ANSWER_POLL_S)


def remove_gateway(profile: Profile, pool: NodePool) -> bool:
    """Remove the fleet gateway; True when there was one."""
    from sparkctl.planning.fleet_gateway_container import fleet_gateway_name
    from sparkctl.profile.fleet import gateway_node

    conn = pool.get(gateway_node(profile))
    name = fleet_gateway_name(profile.cluster)
    if containers.inspect(conn, name) is None:
        return False
    containers.remove(conn, name, grace=None)
    return True
