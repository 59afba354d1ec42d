"""`status` of a fleet: each service's own status (its view: containers, health, drift), its state
in one word, and what the fleet gateway sees (loaded, requests waiting, seconds since the last).

A service is `loaded` when a mode of it answers ready (or the gateway's check passes), `loading` when its containers run but do
not answer yet (or requests wait for it at the gateway), `unknown` when a node of it could not be
asked, `idle-stopped` when an on-demand service has no container (it starts on its next request),
`stopped` otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sparkctl.clients.fleet import ServiceView, fleet_state
from sparkctl.connectors.pool import NodePool
from sparkctl.errors import SparkctlError
from sparkctl.lifecycle.status import ClusterStatus, status
from sparkctl.planning.fleet_view import service_view
from sparkctl.profile.schema import Profile
from sparkctl.secrets import local_ref, resolve_known


@dataclass
class ServiceStatus:
    name: str
    on_demand: bool
    status: ClusterStatus
    seen: ServiceView | None = None  # the gateway's view

    @property
    def state(self) -> str:
        modes = self.status.modes
        if any(m.health.ready for m in modes) or (self.seen is not None and self.seen.loaded):
            return "loaded"
        if any(c.running for c in self.status.containers) or (self.seen and self.seen.waiting):
            return "loading"
        if self.status.unreachable:  # what runs on a node nobody could ask is not known
            return "unknown"
        return "idle-stopped" if self.on_demand else "stopped"

    def to_json(self) -> dict:
        seen = None
        if self.seen is not None:
            s = self.seen
            seen = {
                "loaded": s.loaded,
                "waiting": s.waiting,
                "requests": s.requests,
                "idle_s": s.last_request_age_s,
            }
        return {
            "name": self.name,
            "state": self.state,
            "on_demand": self.on_demand,
            "gateway": seen,
            **self.status.to_json(),
        }


@dataclass
class FleetStatus:
    cluster: str
    url: str
    services: list[ServiceStatus] = field(default_factory=list)
    gateway_error: str | None = None
    supervisor: dict | None = None  # the fleet's on-demand loop, when one runs

    @property
    def unreachable(self) -> bool:
        return any(s.status.unreachable for s in self.services)

    def gateway_line(self) -> str:
        loop = (
            f"; on-demand supervisor pid {self.supervisor.get('pid')}"
            if self.supervisor
            else "; no on-demand supervisor (`sparkctl supervise --detach`)"
        )
        if self.gateway_error:
            return f"fleet endpoint {self.url}/v1: {self.gateway_error}{loop}"
        return f"fleet endpoint {self.url}/v1: up{loop}"

    def to_json(self) -> dict:
        return {
            "cluster": self.cluster,
            "fleet": True,
            "endpoint": f"{self.url}/v1",
            "gateway_error": self.gateway_error,
            "supervisor": self.supervisor,
            "services": [s.to_json() for s in self.services],
        }


def operator_key(profile: Profile) -> str | None:
    """The first service key this machine can read (any service's engine key reads the state)."""
    for name in profile.models:
        key = resolve_known(local_ref("api-key", service_view(profile, name).engine.api_key))
        if key:
            return key
    return None


def gateway_view(profile: Profile) -> tuple[str, dict[str, ServiceView] | None, str | None]:
    """(the fleet's URL, the gateway's per-service view or None, why not)."""
    from sparkctl.lifecycle.fleet_gateway import planned_gateway

    url = planned_gateway(profile).url
    try:
        return url, fleet_state(url, operator_key(profile)), None
    except SparkctlError as exc:
        return url, None, exc.message


def fleet_status(profile: Profile, names: list[str]) -> FleetStatus:
    from sparkctl.lifecycle.supervisor import process as supervisor

    url, seen, why = gateway_view(profile)
    out = FleetStatus(profile.cluster, url, gateway_error=why, supervisor=supervisor.running(profile.cluster))
    for name in names:
        view = service_view(profile, name)
        with NodePool(view, once=True) as pool:
            st = status(view, pool, None)
        out.services.append(ServiceStatus(name, profile.models[name].on_demand, st, (seen or {}).get(name)))
    return out
