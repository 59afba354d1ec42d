"""The fleet's one endpoint as planned (docs/fleet.md "One endpoint"). Pure.

The gateway runs on `gateway.node` at the address that node's rank 0 would bind, on
`gateway.port`, and routes each request by its `model` field (the service's served name) to that
service's own API: its rank 0's gateway, or its router's, where its plan's
endpoint is. Every key any service takes passes the front; each service's gateway checks its own
keys again, so a key of one service never reaches another's engine. The services' own engine keys
(the operators') may read the gateway's state, which sparkctl's supervisor polls for on-demand
starts and idle stops.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sparkctl.planning import hardening as sec
from sparkctl.planning.fleet_gateway import FleetGatewaySpec, FleetRoute
from sparkctl.planning.gateway import named_keys
from sparkctl.planning.model import Plan, PlanFacts
from sparkctl.profile.derived import node_path
from sparkctl.profile.fleet import gateway_node
from sparkctl.profile.schema import Profile
from sparkctl.secrets import SecretRef


def fleet_routes(profile: Profile, plans: Mapping[str, Sequence[Plan]]) -> tuple[FleetRoute, ...]:
    """A route per service, to the API of each of its modes (one runs at a time; the gateway's
    health check finds it, so a switch of modes never changes the gateway)."""
    out = []
    for name, modes in plans.items():
        # the served name only: the engine is asked for the `model` the client sent, and a
        # gateway cannot rewrite a body it routes on (`verify --model SERVICE` sends the served name)
        names = (modes[0].endpoint.served_model_name,)
        upstreams = tuple(dict.fromkeys((p.endpoint.host, p.endpoint.port) for p in modes))
        out.append(FleetRoute(name, names, upstreams, profile.models[name].on_demand))
    return tuple(out)


def _keys(views: Mapping[str, Profile], node_name: str) -> tuple[list[SecretRef], list[SecretRef]]:
    """(every key the front takes, the operators' keys) as the gateway's node reads them."""
    keys: list[SecretRef] = []
    operators: list[SecretRef] = []
    for view in views.values():
        key = view.engine.api_key
        if key is not None:
            ref = sec.secret_ref("api-key", key, view.node(node_name), view, node_path)
            operators.append(ref)
            keys.append(ref)
        keys += [k.ref for k in named_keys(view, node_name)]
    return list(dict.fromkeys(keys)), list(dict.fromkeys(operators))


def fleet_gateway_spec(
    profile: Profile,
    views: Mapping[str, Profile],
    plans: Mapping[str, Sequence[Plan]],
    facts: PlanFacts | None = None,
) -> FleetGatewaySpec:
    """The fleet gateway of `profile` over every service's plans (`plans`: service -> its plan in
    each of its modes; `views`: service -> its single-model view)."""
    node_name = gateway_node(profile)
    node = profile.node(node_name)
    first = next(iter(views.values()))
    ip = None
    if sec.needs_node_ip(first, node, 0):
        ip = (
            node.address
            if sec.is_ip(node.address)
            else (facts or PlanFacts()).addresses.get(node_name, ("",))[0]
        )
    listen = sec.bind_host(first, node, 0, ip or None)
    keys, operators = _keys(views, node_name)
    return FleetGatewaySpec(
        node=node_name,
        listen=listen,
        port=profile.gateway.port,
        routes=fleet_routes(profile, plans),
        keyed=bool(keys),
        keys=tuple(keys),
        operators=tuple(operators),
        wait_s=profile.gateway.wait_s,
    )


def fleet_url(profile: Profile, spec: FleetGatewaySpec) -> str:
    """The fleet's endpoint (a wildcard bind: the node's address; on the local node, loopback)."""
    host = spec.listen
    if sec.all_interfaces(host):
        node = profile.node(spec.node)
        host = "127.0.0.1" if node.is_local else node.address
    host = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{host}:{spec.port}"
