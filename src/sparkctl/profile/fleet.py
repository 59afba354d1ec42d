"""A fleet in the profile: `models:`, named services on the same nodes (docs/fleet.md). Pure.

Each service has its own image, weights, engine launch and modes (solo, TP over nodes, replicas:
the layouts of profile/topology.py), and a memory budget per node it runs on (`memory_gib`, or
what its engine's fraction flag turns into: planning/fleet.py). A single-model profile is a fleet
of one service named `model`; a fleet's top level carries its first service, so that code written
for one model reads one service. `service_profile` is a service as a single-model profile: what
planning builds, with the ports sparkctl assigned it (`assign_ports`): each service's own API port
(unset: the first free one from the engine's default, in steps of 10), rendezvous base and router
metrics port, none bound by two services on one node.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from pydantic import BeforeValidator, Field, ValidationError

from sparkctl.profile.base import Name, Port, Strict
from sparkctl.profile.router import Router
from sparkctl.profile.serving import Engine, Image, Mode, Model
from sparkctl.profile.values import release_keys

if TYPE_CHECKING:
    from sparkctl.profile.schema import Profile

SINGLE = "model"  # the one service of a single-model profile (named after its `model:` key)
SERVICE_KEYS = ("image", "model", "engine", "modes")  # a fleet has these per service, not on top
DIST_STRIDE = 100  # between services' rendezvous bases (a mode's groups use +10 each)
PORT_STEP = 10  # between automatically assigned API ports
PORT_TRIES = 500

Gib = Annotated[float, Field(gt=0)]
_UNITS = {"s": 1, "m": 60, "h": 3600}


def _seconds(value: object) -> object:
    """`90`, `"90s"`, `"10m"`, `"1h"` -> seconds (what idle_stop takes)."""
    if isinstance(value, str) and value[-1:] in _UNITS and value[:-1].strip().isdigit():
        return int(value[:-1]) * _UNITS[value[-1]]
    return value


Seconds = Annotated[int, BeforeValidator(_seconds), Field(ge=10, le=7 * 86400)]


class FleetGateway(Strict):
    """The fleet's one endpoint: a gateway that routes each request by its `model` field."""

    node: Name | None = Field(None, description="The node it runs on (default: the first node).")
    port: Port = Field(8000, description="Its port on that node's API address.")
    wait_s: int = Field(
        300,
        ge=1,
        le=3600,
        description="How long a request for a stopped on-demand service waits for it to start; "
        "then 503 with Retry-After.",
    )


class Service(Strict):
    """One named model of a fleet."""

    image: Image = Field(description="The service's serving image.")
    model: Model = Field(description="Its target (and draft) weights and caches.")
    engine: Annotated[Engine, BeforeValidator(release_keys)] = Field(
        default_factory=Engine,
        description="Its engine and launch; unset port: sparkctl assigns a free one (docs/fleet.md).",
    )
    modes: dict[Name, Mode] = Field(min_length=1, description="Its layouts, e.g. solo and tp2.")
    router: Router | None = Field(None, description="Its router (modes with replicas; default: router:).")
    memory_gib: Gib | dict[Name, Gib] | None = Field(
        None,
        description="GiB it may hold on each node it runs on (one figure, or per node); unset: its "
        "engine's memory fraction flag x the node's memory.",
    )
    on_demand: bool = Field(
        False, description="Started by its first request (`sparkctl supervise` runs the fleet), not by `up`."
    )
    idle_stop: Seconds | None = Field(
        None, description="Stopped after this long without a request (90s, 10m, 1h); on-demand services."
    )


def fill_primary(data: object) -> object:
    """Before validation: a fleet's top level takes its first service's image, model, engine and
    modes. Given there, they must be that service's (a dumped fleet loads again); else refused:
    they belong to each service. `models: {}` is no fleet."""
    if not isinstance(data, dict) or not data.get("models"):
        return data
    models = data["models"]
    if not isinstance(models, dict):
        return data  # pydantic names the type
    try:
        svc = Service.model_validate(next(iter(models.values())))
    except ValidationError:  # reported at models.<name>; the top level gets a stand-in meanwhile
        return {
            **data,
            "image": {"ref": "invalid"},
            "model": {"target": {"id": "invalid/invalid"}},
            "modes": {"invalid": {"nodes": ["invalid"]}},
        }
    parts = {"image": svc.image, "model": svc.model, "engine": svc.engine, "modes": svc.modes}
    for key in SERVICE_KEYS:
        if key in data and not _same(key, data[key], parts[key]):
            raise ValueError(
                f"{key}: with `models:` each service has its own {key}; move it under models.<name>.{key}"
            )
    return {**data, **parts}


def _same(key: str, given: object, first: object) -> bool:
    """A top-level part of a fleet equals its first service's (what a dump of the fleet holds)."""
    try:
        if key == "modes":
            return isinstance(given, dict) and {k: Mode.model_validate(v) for k, v in given.items()} == first
        kind = {"image": Image, "model": Model, "engine": Engine}[key]
        return kind.model_validate(given) == first
    except ValidationError:
        return False


def service_names(profile: Profile) -> list[str]:
    return list(profile.models) or [SINGLE]


@dataclass(frozen=True)
class ServicePorts:
    """The ports sparkctl gives a service: its API port, rendezvous base, router metrics port."""

    port: int
    dist_init_port: int
    metrics_port: int
    assigned: bool  # the API port was chosen by sparkctl (engine.port unset)


def _view(profile: Profile, name: str, ports: ServicePorts | None) -> Profile:
    svc = profile.models[name]
    engine, router, fabric = svc.engine, svc.router or profile.router, profile.fabric
    if ports is not None:
        engine = engine.model_copy(update={"port": ports.port})
        router = router.model_copy(update={"metrics_port": ports.metrics_port})
        fabric = fabric.model_copy(update={"dist_init_port": ports.dist_init_port})
    parts = {"image": svc.image, "model": svc.model, "engine": engine, "modes": svc.modes}
    return profile.model_copy(update={**parts, "router": router, "fabric": fabric, "models": {}})


def _port_map(view: Profile) -> dict[str, dict[int, str]]:
    """node -> port -> what binds it, over every mode of a service (any may run)."""
    from sparkctl.profile.topology import mode_ports

    out: dict[str, dict[int, str]] = {}
    for mode_name, mode in view.modes.items():
        for node, ports in mode_ports(view, mode).items():
            for port, what in ports.items():
                out.setdefault(node, {}).setdefault(port, f"{what} in mode {mode_name}")
    return out


def _clash(a: Mapping[str, Mapping[int, str]], b: Mapping[str, Mapping[int, str]]) -> tuple[str, int] | None:
    for node, ports in b.items():
        for port in ports:
            if port in a.get(node, {}):
                return node, port
    return None


def assign_ports(profile: Profile) -> dict[str, ServicePorts]:
    """Each service's ports: the rendezvous base and router metrics port shifted by its index, the
    API port as given, else the first from the engine's default (step 10) whose ports on the
    service's nodes no other service binds. Services that set engine.port are placed first."""
    from sparkctl.profile.topology import TopologyError

    names = list(profile.models)
    fixed = {n for n in names if "port" in profile.models[n].engine.model_fields_set}
    taken: dict[str, dict[int, str]] = {}
    out: dict[str, ServicePorts] = {}
    for name in sorted(names, key=lambda n: (n not in fixed, names.index(n))):
        i, svc = names.index(name), profile.models[name]
        own = svc.router is not None and "metrics_port" in svc.router.model_fields_set
        metrics = svc.router.metrics_port if own and svc.router else profile.router.metrics_port + i
        dist = profile.fabric.dist_init_port + DIST_STRIDE * i
        port = svc.engine.port
        for _ in range(1 if name in fixed else PORT_TRIES):
            ports = ServicePorts(port, dist, metrics, name not in fixed)
            try:
                used = _port_map(_view(profile, name, ports))
            except TopologyError:
                used = {}  # its own layout is refused by the mode checks
            if name in fixed or _clash(taken, used) is None or port + PORT_STEP > 65535:
                break
            port += PORT_STEP
        out[name] = ports
        for node, p in used.items():
            taken.setdefault(node, {}).update({k: f"models.{name}'s {v}" for k, v in p.items()})
    return {n: out[n] for n in names}


def service_profile(profile: Profile, name: str) -> Profile:
    """One service as a single-model profile, with its assigned ports (the profile itself for a
    single-model profile's one service)."""
    if not profile.models and name == SINGLE:
        return profile
    if name not in profile.models:
        from sparkctl.errors import UsageError

        raise UsageError(
            f"unknown service '{name}'", fix=f"services in this profile: {', '.join(service_names(profile))}"
        )
    return _view(profile, name, assign_ports(profile)[name])


def check_fleet(profile: Profile, check_modes: Callable[[Profile, str], None]) -> None:
    """Every service's modes (`check_modes`, the schema's mode rules, at models.<name>.), its
    memory_gib nodes, then no port bound by two services on one node."""
    nodes = {n.name for n in profile.nodes}
    for name, svc in profile.models.items():
        check_modes(_view(profile, name, None), f"models.{name}.")
        if isinstance(svc.memory_gib, dict):
            for node in svc.memory_gib:
                if node not in nodes:
                    raise ValueError(
                        f"models.{name}.memory_gib.{node}: unknown node '{node}' (nodes: {', '.join(sorted(nodes))})"
                    )
    for name, svc in profile.models.items():
        if svc.idle_stop is not None and not svc.on_demand:
            raise ValueError(
                f"models.{name}.idle_stop: only an on-demand service is stopped when idle "
                f"(fix: set models.{name}.on_demand: true, or drop idle_stop)"
            )
    ports = assign_ports(profile)
    maps = {name: _port_map(_view(profile, name, ports[name])) for name in profile.models}
    _check_gateway(profile, maps)
    names = list(profile.models)
    for j, b in enumerate(names):
        for a in names[:j]:
            hit = _clash(maps[a], maps[b])
            if hit is None:
                continue
            node, port = hit
            key = "engine.port" if not ports[b].assigned else "engine.port (assigned)"
            raise ValueError(
                f"models.{b}.engine.port: [ports-distinct] port {port} on node '{node}' is both "
                f"models.{a}'s {maps[a][node][port]} and models.{b}'s {maps[b][node][port]} "
                f"({key} {ports[b].port}; fix: leave models.{b}.engine.port unset, sparkctl then "
                "assigns a free one, or move it apart)"
            )


def gateway_node(profile: Profile) -> str:
    """The node the fleet's gateway runs on."""
    return profile.gateway.node or profile.nodes[0].name


def _check_gateway(profile: Profile, maps: Mapping[str, Mapping[str, Mapping[int, str]]]) -> None:
    node, port = gateway_node(profile), profile.gateway.port
    if node not in {n.name for n in profile.nodes}:
        raise ValueError(
            f"gateway.node: unknown node '{node}' (nodes: {', '.join(n.name for n in profile.nodes)})"
        )
    for name, ports in maps.items():
        what = ports.get(node, {}).get(port)
        if what is not None:
            raise ValueError(
                f"gateway.port: [ports-distinct] port {port} on node '{node}' is the fleet's gateway "
                f"and models.{name}'s {what} (fix: set gateway.port to a free port)"
            )
