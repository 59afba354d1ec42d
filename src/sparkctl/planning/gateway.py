"""The gateway that owns the API port (issue 38, docs/security.md "The gateway"): HAProxy 2.6
from Debian, in its own container, in front of the engine (or the router) on loopback.

Pure: the spec is data (`plan --json` shows it) and `haproxy_config` renders it. Why HAProxy and
not SMG (measured, docs/security.md): SMG 1.13 on the public port relays the engine's
/get_server_info and /get_model_info (its settings, keys included) to any key holder, serves
/engine_metrics without a key, and lets a serving key POST /workers, which registers any URL as a
worker: it has no route allowlist to turn those off. HAProxy parses HTTP/1.1 and HTTP/2 with
bounded buffers and lets the config refuse everything but an exact list of request targets.

The key check compares sha256("Bearer <key>") of the one Authorization header against a file of
hashes on the node's tmpfs (0400, the node user's): no raw key is in the config, on an argv or in
`docker inspect`, and an exact-match lookup of a hash leaks nothing useful about the key by its
timing. The engine keeps its own key: the client's header is forwarded unchanged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sparkctl.planning.gateway_owner import OWNER_PATH
from sparkctl.profile.derived import served_model_name
from sparkctl.profile.topology import internal_offset
from sparkctl.secrets import SecretRef, bearer_sha256

if TYPE_CHECKING:
    from sparkctl.profile.schema import Profile

GATEWAY_IMAGE = "sparkctl/gateway-haproxy:2.6.12"
CONFIG_PATH = "/run/sparkctl-gateway/haproxy.cfg"  # inside the container (a read-only tmpfs file)
KEYS_PATH = "/run/sparkctl-gateway/keys.sha256"  # inside the container (the tmpfs file, read-only)
NAMES_PATH = "/run/sparkctl-gateway/names.map"  # sha256 -> key name (named keys only)
UPSTREAM_PATH = "/run/sparkctl-gateway/upstream.map"  # "engine Bearer <engine key>" (named keys only)
KEY_METRICS = ("GET", "/sparkctl/gateway-metrics")  # per-key counts (HAProxy's Prometheus exporter)
OPERATOR = "sparkctl"  # engine.api_key's name in the counts (profile/serving.py OPERATOR_KEY_NAME)
LOG_FORMAT = '"%ci %HM %HP %ST %B %Tq/%Tw/%Tc/%Tr/%Ta"'
HEALTH_ROUTE = "/health"  # the engine's own check, passed through (it may run a generation)

# (method, request target): exact bytes, so no spelling of another path (case, //, %2F, dot
# segments, ;params, a query, an absolute-form target) ever matches one of these.
OPENAI_ROUTES: tuple[tuple[str, str], ...] = (
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/completions"),
    ("POST", "/v1/responses"),
    ("GET", "/v1/models"),
)
EMBEDDINGS_ROUTE = ("POST", "/v1/embeddings")
# Served too: /health without a key (load balancers, readiness), /metrics with it (Prometheus
# counters, no setting: `top` and the rolling switch's drain read them through the gateway).
HEALTH = ("GET", HEALTH_ROUTE)
METRICS = ("GET", "/metrics")


@dataclass(frozen=True)
class Bounds:
    """What one client can hold (docs/security.md): header bytes (HAProxy's buffer), body bytes
    (a Content-Length is required on a body; chunked request bodies are refused), time to send a
    whole request head, idle keep-alive time, connections."""

    max_header_bytes: int = 32768
    max_body_bytes: int = 4 * 1024 * 1024
    header_timeout_s: int = 10
    idle_timeout_s: int = 30
    client_timeout_s: int = 300  # inactivity while a request or answer is in flight
    server_timeout_s: int = 1800  # inactivity of the engine's answer (a long prefill streams nothing)
    max_connections: int = 4096


@dataclass(frozen=True)
class NamedKey:
    """A client's key (engine.api_keys): a backend of its own counts its requests; `per_minute`
    bounds them (429 beyond)."""

    name: str
    ref: SecretRef
    per_minute: int | None = None


@dataclass(frozen=True)
class GatewaySpec:
    """The gateway container on `node`: it listens on `listen`:`port` (the API's address) and
    forwards the allowed `routes` to `upstream_host`:`upstream_port` (the engine on loopback)."""

    node: str
    listen: str
    port: int
    upstream_host: str
    upstream_port: int
    routes: tuple[tuple[str, str], ...] = OPENAI_ROUTES
    keyed: bool = False  # a key file of sha256 hashes is mounted and required
    bounds: Bounds = field(default_factory=Bounds)
    image: str = GATEWAY_IMAGE
    key: SecretRef | None = None  # the key whose hash the file holds (as the node reads it)
    # (target, JSON) the gateway answers itself to a keyed GET: a replica's metadata for the
    # router (router_answers), so that no engine route with settings in it is ever passed
    answers: tuple[tuple[str, str], ...] = ()
    # engine.api_keys: besides `key` (the engine's own, named OPERATOR) the gateway takes these,
    # counts each key's requests, and forwards them with the engine's key in their place
    named: tuple[NamedKey, ...] = ()

    def __post_init__(self) -> None:
        if self.upstream_host in UNSPECIFIED:
            raise ValueError(
                f"the gateway's upstream is {self.upstream_host}: name the engine's loopback or fabric address"
            )


UNSPECIFIED = ("0.0.0.0", "::", "")
LOOPBACK = "127.0.0.1"


def key_hash(key: str) -> str:
    """The line the gateway's key file holds for `key`: sha256 of the whole header value."""
    return bearer_sha256(key)


def key_file_text(keys: list[str]) -> str:
    return "".join(f"{key_hash(k)}\n" for k in keys)


def router_answers(served_name: str, model_path: str, tp: int) -> tuple[tuple[str, str], ...]:
    """What sglang-router asks a worker it registers (GET /server_info, /model_info; only on a 404
    the deprecated /get_ spellings): the served name it lists at /v1/models, and the sizes it plans with. The
    gateway answers from the plan; the engine's own answer (its settings, the keys among them)
    never leaves the node."""
    server = {"served_model_name": served_name, "model_path": model_path, "tp_size": tp, "dp_size": 1}
    model = {"model_path": model_path, "is_generation": True}
    # a single quote closes HAProxy's quoted string: JSON spells it \u0027 instead
    text = {
        k: json.dumps(v).replace("'", "\\u0027") for k, v in (("server_info", server), ("model_info", model))
    }
    return tuple((f"/{name}", body) for name, body in text.items())


def routes_for(embeddings: bool) -> tuple[tuple[str, str], ...]:
    return (*OPENAI_ROUTES, EMBEDDINGS_ROUTE) if embeddings else OPENAI_ROUTES


def gateway_container_name(container: str) -> str:
    """The gateway of the rank (or router) container `container`: removed whenever it is."""
    return f"{container}-gateway"


def served_container(name: str) -> str | None:
    """The rank (or router) container whose API the gateway `name` serves; None for any other."""
    suffix = gateway_container_name("")
    return name[: -len(suffix)] if name.endswith(suffix) and len(name) > len(suffix) else None


def framing_rules(b: Bounds) -> list[str]:
    """Framing a gateway refuses outright: any Transfer-Encoding (so no CL/TE conflict in either
    order, no chunk trick reaches the engine), more than one Content-Length, a Connection header
    naming anything but close/keep-alive (hop-by-hop tricks), Upgrade; a body over the bound (413)."""
    return [
        "    http-request deny deny_status 400 if { req.hdr_cnt(transfer-encoding) gt 0 }",
        "    http-request deny deny_status 400 if { req.hdr_cnt(content-length) gt 1 }",
        "    http-request deny deny_status 400 if { req.hdr_cnt(connection) gt 1 }",
        "    http-request deny deny_status 400 if { req.hdr_cnt(connection) eq 1 } "
        "!{ req.fhdr(connection) -i -m str close keep-alive }",
        "    http-request deny deny_status 400 if { req.hdr_cnt(upgrade) gt 0 }",
        f"    http-request deny deny_status 413 if {{ req.hdr_val(content-length) gt {b.max_body_bytes} }}",
    ]


def key_condition(keys_path: str) -> str:
    """True when every Authorization value is a key of `keys_path` (hashes): sglang-router
    forwards the client's header and adds its own (two equal lines); the first and the last are
    checked, a third is refused."""
    valid = [
        f"{{ req.fhdr(authorization,{occ}),sha2(256),hex,lower -m str -f {keys_path} }}" for occ in (1, -1)
    ]
    return f"{{ req.hdr_cnt(authorization) ge 1 }} {{ req.hdr_cnt(authorization) le 2 }} {' '.join(valid)}"


def _frontend(spec: GatewaySpec) -> list[str]:
    b = spec.bounds
    methods = sorted({m for m, _ in spec.routes})
    route_names = [f"route_{m.lower()}" for m in methods]
    acls = []
    for m in methods:  # an exact target, or (prefixed "~") an anchored regex: the router's DELETE
        exact = [t for mm, t in spec.routes if mm == m and not t.startswith("~")]
        regex = [t[1:] for mm, t in spec.routes if mm == m and t.startswith("~")]
        acls += [f"    acl route_{m.lower()} url -m str {' '.join(exact)}"] if exact else []
        acls += [f"    acl route_{m.lower()} url -m reg {r}" for r in regex]
    lines = [
        "frontend api",
        f"    bind {spec.listen}:{spec.port}",
        f"    maxconn {b.max_connections}",
        *acls,
        *[f"    acl meth_{m.lower()} method {m}" for m in methods],
        "    acl is_get method GET",
        *framing_rules(b),
        f"    acl is_health url -m str {HEALTH_ROUTE}",
    ]
    allowed = " || ".join(f"meth_{m.lower()} {r}" for m, r in zip(methods, route_names, strict=True))
    answered = [f"answer_{i}" for i in range(len(spec.answers))]
    lines += [f"    acl {a} url -m str {t}" for a, (t, _) in zip(answered, spec.answers, strict=True)]
    allowed += "".join(f" || is_get {a}" for a in answered)
    if spec.named:
        lines.append(f"    acl key_metrics url -m str {KEY_METRICS[1]}")
        allowed += " || is_get key_metrics"
    lines.append(f"    http-request deny deny_status 404 unless {allowed} || is_get is_health")
    if spec.keyed:
        lines.append(
            f"    http-request deny deny_status 401 unless is_get is_health || {key_condition(KEYS_PATH)}"
        )
    lines += _named_rules(spec) if spec.named else []
    lines += [  # after the key check: the answers are for key holders (the router) only
        f"    http-request return status 200 content-type application/json string '{body}' if is_get {a}"
        for a, (_, body) in zip(answered, spec.answers, strict=True)
    ]
    lines += [
        "    http-request set-header Host upstream",  # the engine never sees the client's Host
        "    http-response del-header server",
        *(["    use_backend key_%[var(txn.key)] if { var(txn.key) -m found }"] if spec.named else []),
        "    default_backend engine",
    ]
    return lines


def _named_rules(spec: GatewaySpec) -> list[str]:
    """After the key check: name the key (its hash in the names map), give the per-key counts to
    the operator's key only, and send the engine its own key in place of a client's."""
    return [
        f"    http-request set-var(txn.key) req.fhdr(authorization,1),sha2(256),hex,lower,map({NAMES_PATH})",
        f"    http-request deny deny_status 403 if is_get key_metrics !{{ var(txn.key) -m str {OPERATOR} }}",
        "    http-request use-service prometheus-exporter if is_get key_metrics",
        f"    http-request set-header Authorization %[str(engine),map({UPSTREAM_PATH})] if {{ var(txn.key) -m found }}",
    ]


def _server(spec: GatewaySpec, owner: bool) -> str:
    return (
        f"    server engine {spec.upstream_host}:{spec.upstream_port} maxconn {spec.bounds.max_connections}"
        + (" disabled" if owner else "")
    )


def _key_backends(spec: GatewaySpec, owner: bool) -> list[str]:
    """A backend per key (the operator's first): HAProxy counts each backend's requests and answers."""
    lines: list[str] = []
    for name, limit in [(OPERATOR, None), *((k.name, k.per_minute) for k in spec.named)]:
        lines += ["", f"backend key_{name}", "    retries 0"]
        if limit is not None:
            lines += [
                "    stick-table type integer size 1 expire 60s store http_req_rate(60s)",
                "    http-request track-sc1 int(1)",
                f"    http-request deny deny_status 429 if {{ sc_http_req_rate(1) gt {limit} }}",
            ]
        lines.append(_server(spec, owner))
    return lines


def defaults_section(b: Bounds) -> list[str]:
    """HAProxy's defaults of a gateway: HTTP, the log line, keep-alive both ways, the bounds' timeouts."""
    return [
        "defaults",
        "    mode http",
        "    log global",
        # method, path without its query, status, bytes, timings: never the query or a header, so a
        # key a client put in either stays out of the log
        f"    log-format {LOG_FORMAT}",
        "    option http-keep-alive",
        "    option http-no-delay",  # a streamed token leaves at once (no MSG_MORE coalescing)
        "    http-reuse safe",  # upstream connections stay open across client requests
        "    timeout connect 5s",
        f"    timeout http-request {b.header_timeout_s}s",
        f"    timeout http-keep-alive {b.idle_timeout_s}s",
        f"    timeout client {b.client_timeout_s}s",
        f"    timeout server {b.server_timeout_s}s",
    ]


def haproxy_config(spec: GatewaySpec, owner_uid: int | None = None) -> str:
    """The whole haproxy.cfg for `spec` (no stats page, no admin socket, no key). `owner_uid`: the
    engine's uid; its server then starts in maintenance and passes requests only while that uid
    owns the upstream port (planning/gateway_owner.py)."""
    b = spec.bounds
    owner = owner_uid is not None
    lines = [
        "global",
        *([f"    lua-load {OWNER_PATH}"] if owner else []),
        f"    maxconn {b.max_connections}",
        f"    tune.bufsize {b.max_header_bytes}",
        "    tune.http.maxhdr 64",
        # One thread carries far more requests than an engine serves, with no hand-off between
        # threads: bench/gateway.py measured /v1/models at 0.83x direct with 1, 0.78x with 2.
        "    nbthread 1",
        "    log stdout format raw local0 info",
        "",
        *defaults_section(b),
        "",
        *_frontend(spec),
        "",
        "backend engine",
        # No health check: a TCP check's reset on every round fills a starting engine's log with
        # tracebacks (pushing its real error out of the tail `up` shows), and its /health may run
        # a generation. Until the engine listens a request's connect fails: 503 here, no retry.
        "    retries 0",
        _server(spec, owner),
        *(_key_backends(spec, owner) if spec.named else []),
        "",
    ]
    return "\n".join(lines)


def gateway_spec(
    profile: Profile,
    node: str,
    node_rank: int,
    listen: str,
    port: int,
    key: SecretRef | None,
    extra: tuple[tuple[str, str], ...] = (METRICS,),
    routed_tp: int | None = None,
) -> GatewaySpec | None:
    """The gateway of a group's rank 0 (or the router) when engine.gateway is on: it takes the
    API's address and port; the engine moves to 127.0.0.1 and the port engine.internal_port (or
    port - 10000) gives. `routed_tp`: the replica's TP size when the router reaches it here."""
    eng = profile.engine
    if not eng.gateway or node_rank != 0:
        return None
    upstream = port + internal_offset(eng.port, eng.internal_port)
    routes = (*routes_for(False), *extra)
    named = named_keys(profile, node)
    model = (served_model_name(profile), profile.model.target.id)
    answers = () if routed_tp is None else router_answers(*model, routed_tp)
    return GatewaySpec(
        node, listen, port, LOOPBACK, upstream, routes, key is not None, key=key, answers=answers, named=named
    )


def named_keys(profile: Profile, node_name: str) -> tuple[NamedKey, ...]:
    """engine.api_keys as the node reads them (a file: key is that node's path)."""
    from sparkctl.planning.hardening import secret_ref
    from sparkctl.profile.derived import node_path

    node = profile.node(node_name)
    return tuple(
        NamedKey(name, secret_ref(f"api-key-{name}", key, node, profile, node_path), key.per_minute)
        for name, key in profile.engine.api_keys.items()
    )


def docker_run_args(
    spec: GatewaySpec, name: str, user: str, config_file: str, keys_file: str | None
) -> list[str]:
    """`docker run` argv for the gateway (no secret in it: the key hashes are a mounted file).
    Least privilege like every container: no capability (the port is above 1023), no new
    privileges, the node user's uid:gid, a read-only root, bounded pids and open files."""
    b = spec.bounds
    nofile = 4 * b.max_connections + 64  # two sockets per proxied connection, and headroom
    argv = [
        "run", "-d", "--name", name, "--network", "host", "--restart", "no",
        "--cap-drop", "ALL", "--security-opt", "no-new-privileges:true",
        "--user", user, "--read-only", "--pids-limit", "256",
        "--ulimit", f"nofile={nofile}:{nofile}",
        "-v", f"{config_file}:{CONFIG_PATH}:ro",
    ]  # fmt: skip
    if keys_file is not None:
        argv += ["-v", f"{keys_file}:{KEYS_PATH}:ro"]
    return [*argv, spec.image, "haproxy", "-db", "-f", CONFIG_PATH]
