"""The fleet's gateway on its node: started (or replaced when its config changed) by every `up`
of a fleet's service, removed by `down` of the whole fleet (docs/fleet.md "One endpoint").

It does not depend on which services run: it routes to every service's address and reports the
ones whose gateway does not answer /health as not loaded, so starting or stopping one service
never restarts it.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkctl.connectors.pool import NodePool
from sparkctl.lifecycle.addresses import node_addresses
from sparkctl.planning.build import build_plan
from sparkctl.planning.fleet_endpoint import fleet_gateway_spec, fleet_url
from sparkctl.planning.fleet_gateway import FleetGatewaySpec
from sparkctl.planning.fleet_gateway_container import fleet_gateway_container
from sparkctl.planning.fleet_view import service_views
from sparkctl.planning.model import LABEL_PREFIX, Plan, PlanFacts, RankSpec
from sparkctl.profile.schema import Profile
from sparkctl.runtime import containers
from sparkctl.runtime.secret_files import seal


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
    return FleetGateway(gw.spec, spec, gw.url, "replaced" if now is not None else "started")


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
