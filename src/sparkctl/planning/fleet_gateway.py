"""The fleet's one endpoint (issue 39, docs/fleet.md "One endpoint"): an HAProxy 2.6 container in
front of every service's own gateway (planning/gateway.py), routing each POST by its JSON body's
`model` to that service, listing every service at /v1/models with whether it is loaded, and
holding a request for a stopped on-demand service until the supervisor has started it
(planning/fleet_gateway_lua.py), or answering 503 with Retry-After after `wait_s`.

Pure: `fleet_haproxy_config` and `fleet_files` render the spec. The framing refusals, the key
check (sha256 of the whole Authorization value against a file of hashes) and the log line are the
service gateway's own functions. The client's Authorization header is forwarded unchanged: each
service's gateway checks its own keys again. The body must fit HAProxy's buffer to be routed, so
the buffer holds a whole request head plus `max_body_bytes` (and the rewrite reserve).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace

from sparkctl.planning.fleet_gateway_lua import SERVER, fleet_lua
from sparkctl.planning.gateway import (
    CONFIG_PATH,
    GATEWAY_IMAGE,
    HEALTH_ROUTE,
    KEYS_PATH,
    UNSPECIFIED,
    Bounds,
    defaults_section,
    framing_rules,
    key_condition,
)
from sparkctl.secrets import SecretFile, SecretRef

LUA_PATH = "/run/sparkctl-gateway/fleet.lua"  # inside the container (read-only tmpfs files)
MODELS_MAP_PATH = "/run/sparkctl-gateway/models.map"  # `model` value -> service
UNKNOWN_PATH = "/run/sparkctl-gateway/unknown-model.json"  # the 404 for a model no service serves
OPERATORS_PATH = "/run/sparkctl-gateway/operators.sha256"  # the keys that may read the fleet state
STATE_ROUTE = ("GET", "/sparkctl/fleet-state")
MODELS_ROUTE = ("GET", "/v1/models")
POST_ROUTES = ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/embeddings")
MAXREWRITE = 1024  # HAProxy's reserve for header rewrites, kept out of the buffer a request fills
# A whole JSON body in the buffer (1 MiB: long chats fit, a base64 image may not: 413), two
# buffers a connection, so fewer connections than a service's gateway takes.
FLEET_BOUNDS = Bounds(max_body_bytes=1 << 20, max_connections=1024)
SERVICE_RE = re.compile(r"[a-z0-9][a-z0-9_.-]*")
# served names go into a map file, a Lua literal and JSON: no space, quote, backslash or control
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/@+=-]*")


@dataclass(frozen=True)
class FleetRoute:
    """One service behind the fleet gateway: the `model` values routed to it and its own gateway."""

    service: str
    names: tuple[str, ...]  # the served model name(s), and the service name; the first is listed
    # that service's own gateway in each of its modes (rank 0's or the router's API address): one
    # mode runs at a time, and the check finds it, so a switch of modes never changes this config
    upstreams: tuple[tuple[str, int], ...]
    on_demand: bool = False  # a request may wait for it to be started

    def __post_init__(self) -> None:
        if not SERVICE_RE.fullmatch(self.service):
            raise ValueError(f"fleet service name {self.service!r}: use [a-z0-9][a-z0-9_.-]*")
        bad = [n for n in self.names if not NAME_RE.fullmatch(n)]
        if not self.names or bad:
            raise ValueError(
                f"service {self.service}: model names {bad or 'missing'}: use [A-Za-z0-9_.:/@+=-]"
            )
        for host, port in self.upstreams or (("", 0),):
            if host in UNSPECIFIED or not 0 < port < 65536:
                raise ValueError(
                    f"service {self.service}: upstream {host}:{port}: name its gateway's address and port"
                )


@dataclass(frozen=True)
class FleetGatewaySpec:
    """The fleet gateway on `node`, listening on `listen`:`port` in front of every route."""

    node: str
    listen: str
    port: int
    routes: tuple[FleetRoute, ...]
    keyed: bool  # False only when no service has a key
    keys: tuple[SecretRef, ...] = ()  # every key any service takes: they pass the front
    operators: tuple[SecretRef, ...] = ()  # keys that may read the state (the services' engine keys)
    wait_s: int = 300  # how long a request for a stopped on-demand service waits
    retry_after_s: int = 30
    bounds: Bounds = field(default_factory=lambda: FLEET_BOUNDS)
    image: str = GATEWAY_IMAGE

    def __post_init__(self) -> None:
        services = [r.service for r in self.routes]
        names = [n for r in self.routes for n in r.names]
        if not self.routes or len(set(services)) < len(services):
            raise ValueError(f"the fleet gateway's services {services}: name each one once")
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"model names {twice} are routed to two services: give each its own")
        if self.keyed != bool(self.keys):
            raise ValueError("the fleet gateway is keyed exactly when some service takes a key")
        if self.wait_s < 0 or self.retry_after_s < 1:
            raise ValueError(f"wait_s {self.wait_s} and retry_after_s {self.retry_after_s}: >= 0 and >= 1")


def all_names(spec: FleetGatewaySpec) -> list[str]:
    return [n for r in spec.routes for n in r.names]


def unknown_model_body(spec: FleetGatewaySpec) -> str:
    """OpenAI's 404 for a model no service serves (static: the client's input is never echoed)."""
    message = f"the model is not served here; this endpoint serves: {', '.join(all_names(spec))}"
    return json.dumps(
        {"error": {"message": message, "type": "invalid_request_error", "code": "model_not_found"}}
    )


UNLOADED_BODY = json.dumps(
    {
        "error": {
            "message": "the model is not loaded yet; retry after the Retry-After seconds",
            "type": "service_unavailable",
            "code": "model_not_loaded",
        }
    }
)


def _frontend(spec: FleetGatewaySpec) -> list[str]:
    b = spec.bounds
    lines = [
        "frontend api",
        f"    bind {spec.listen}:{spec.port}",
        f"    maxconn {b.max_connections}",
        "    option http-buffer-request",  # the whole body (up to the buffer) before any rule
        f"    acl route_post url -m str {' '.join(POST_ROUTES)}",
        "    acl meth_post method POST",
        "    acl is_get method GET",
        *framing_rules(b),
        f"    acl is_health url -m str {HEALTH_ROUTE}",
        f"    acl is_models url -m str {MODELS_ROUTE[1]}",
        f"    acl is_state url -m str {STATE_ROUTE[1]}",
        "    http-request deny deny_status 404 unless meth_post route_post || is_get is_models"
        " || is_get is_state || is_get is_health",
        "    http-request return status 200 content-type application/json string "
        """'{"status":"ok"}' if is_get is_health""",
    ]
    if spec.keyed:
        lines.append(f"    http-request deny deny_status 401 unless {key_condition(KEYS_PATH)}")
        ops = f" || {key_condition(OPERATORS_PATH)}" if spec.operators else ""
        lines.append(f"    http-request deny deny_status 403 unless !is_state{ops}")
    return [*lines, *_routing(spec)]


def _routing(spec: FleetGatewaySpec) -> list[str]:
    """After the key check: the two answers of the gateway's own, then a POST by its `model`."""
    return [
        "    http-request use-service lua.fleet_state if is_get is_state",
        "    http-request use-service lua.fleet_models if is_get is_models",
        f"    http-request set-var(txn.svc) req.body,json_query('$.model'),map({MODELS_MAP_PATH})",
        f"    http-request return status 404 content-type application/json file {UNKNOWN_PATH}"
        " unless { var(txn.svc) -m found }",
        "    http-request lua.fleet_wait",
        f"    http-request return status 503 content-type application/json hdr Retry-After {spec.retry_after_s}"
        f" string '{UNLOADED_BODY}' if {{ var(txn.unloaded) -m found }}",
        "    http-response del-header server",
        "    use_backend svc_%[var(txn.svc)]",
    ]


def _backend(route: FleetRoute, b: Bounds) -> list[str]:
    """The service's gateway, checked at its keyless /health every 2 s (an engine may generate a token for it): UP is `loaded`."""
    return [
        "",
        f"backend svc_{route.service}",
        "    retries 0",
        f"    option httpchk GET {HEALTH_ROUTE}",
        *(
            f"    server {SERVER}{i} {host}:{port} maxconn {b.max_connections} check inter 2s rise 1 fall 1"
            for i, (host, port) in enumerate(route.upstreams)
        ),
    ]


def fleet_haproxy_config(spec: FleetGatewaySpec) -> str:
    """The whole haproxy.cfg of the fleet gateway (no stats page, no admin socket, no key)."""
    b = spec.bounds
    # a waiting client sends nothing: its inactivity bound covers the whole wait
    waiting = replace(b, client_timeout_s=max(b.client_timeout_s, spec.wait_s + 30))
    lines = [
        "global",
        f"    lua-load {LUA_PATH}",
        f"    maxconn {b.max_connections}",
        f"    tune.bufsize {b.max_header_bytes + b.max_body_bytes + MAXREWRITE}",
        f"    tune.maxrewrite {MAXREWRITE}",
        "    tune.http.maxhdr 64",
        "    nbthread 1",  # one Lua state: the counts and waiters are the whole gateway's
        "    log stdout format raw local0 info",
        "",
        *defaults_section(waiting),
        "    timeout check 2s",
        "",
        *_frontend(spec),
    ]
    for route in spec.routes:
        lines += _backend(route, b)
    return "\n".join([*lines, ""])


def fleet_files(spec: FleetGatewaySpec) -> dict[str, str]:
    """Container path -> text: the config, the Lua, the models map and the unknown-model answer."""
    models = "".join(f"{n} {r.service}\n" for r in spec.routes for n in r.names)
    lua = fleet_lua([(r.service, r.names[0], r.on_demand) for r in spec.routes], spec.wait_s)
    return {
        CONFIG_PATH: fleet_haproxy_config(spec),
        LUA_PATH: lua,
        MODELS_MAP_PATH: models,
        UNKNOWN_PATH: unknown_model_body(spec),
    }


def fleet_key_files(spec: FleetGatewaySpec) -> list[SecretFile]:
    """The hashes of every key (the front's check) and of the operators' (the state's)."""
    if not spec.keyed:
        return []
    keys = list(dict.fromkeys(spec.keys))
    operators = list(dict.fromkeys(spec.operators))
    return [
        *(SecretFile(KEYS_PATH, k, hashed=True) for k in keys),
        *(SecretFile(OPERATORS_PATH, k, hashed=True) for k in operators),
    ]
