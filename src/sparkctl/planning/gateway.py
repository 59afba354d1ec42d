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

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparkctl.planning.model import Plan, RankSpec

GATEWAY_IMAGE = "sparkctl/gateway-haproxy:2.6.12"
CONFIG_PATH = "/etc/sparkctl-gateway/haproxy.cfg"  # inside the container (mounted read-only)
KEYS_PATH = "/run/sparkctl-gateway/keys.sha256"  # inside the container (the tmpfs file, read-only)
LOG_FORMAT = '"%ci %HM %HP %ST %B %Tq/%Tw/%Tc/%Tr/%Ta"'
HEALTH_ROUTE = "/health"  # answered by the gateway itself: 200 while the engine's check passes

# (method, request target): exact bytes, so no spelling of another path (case, //, %2F, dot
# segments, ;params, a query, an absolute-form target) ever matches one of these.
OPENAI_ROUTES: tuple[tuple[str, str], ...] = (
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/completions"),
    ("POST", "/v1/responses"),
    ("GET", "/v1/models"),
)
EMBEDDINGS_ROUTE = ("POST", "/v1/embeddings")


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

    def __post_init__(self) -> None:
        if self.upstream_host in UNSPECIFIED:
            raise ValueError(
                f"the gateway's upstream is {self.upstream_host}: name the engine's loopback or fabric address"
            )


UNSPECIFIED = ("0.0.0.0", "::", "")
LOOPBACK = "127.0.0.1"


def gateway_container_name(cluster: str) -> str:
    return f"sparkctl-{cluster}-gateway"


def key_hash(key: str) -> str:
    """The line the gateway's key file holds for `key`: sha256 of the whole header value."""
    return hashlib.sha256(f"Bearer {key}".encode()).hexdigest()


def key_file_text(keys: list[str]) -> str:
    return "".join(f"{key_hash(k)}\n" for k in keys)


def routes_for(embeddings: bool) -> tuple[tuple[str, str], ...]:
    return (*OPENAI_ROUTES, EMBEDDINGS_ROUTE) if embeddings else OPENAI_ROUTES


def _frontend(spec: GatewaySpec) -> list[str]:
    b = spec.bounds
    methods = sorted({m for m, _ in spec.routes})
    route_names = [f"route_{m.lower()}" for m in methods]
    acls = [
        f"    acl route_{m.lower()} url -m str {' '.join(t for mm, t in spec.routes if mm == m)}"
        for m in methods
    ]
    lines = [
        "frontend api",
        f"    bind {spec.listen}:{spec.port}",
        f"    maxconn {b.max_connections}",
        *acls,
        *[f"    acl meth_{m.lower()} method {m}" for m in methods],
        "    acl is_get method GET",
        # Framing the gateway refuses outright: any Transfer-Encoding (so no CL/TE conflict in
        # either order, no chunk trick reaches the engine), more than one Content-Length, a
        # Connection header naming anything but close/keep-alive (hop-by-hop tricks), Upgrade.
        "    http-request deny deny_status 400 if { req.hdr_cnt(transfer-encoding) gt 0 }",
        "    http-request deny deny_status 400 if { req.hdr_cnt(content-length) gt 1 }",
        "    http-request deny deny_status 400 if { req.hdr_cnt(connection) gt 1 }",
        "    http-request deny deny_status 400 if { req.hdr_cnt(connection) eq 1 } "
        "!{ req.fhdr(connection) -i -m str close keep-alive }",
        "    http-request deny deny_status 400 if { req.hdr_cnt(upgrade) gt 0 }",
        f"    http-request deny deny_status 413 if {{ req.hdr_val(content-length) gt {b.max_body_bytes} }}",
        f"    http-request return status 200 content-type text/plain string ok if is_get {{ url -m str {HEALTH_ROUTE} }} "
        "{ nbsrv(engine) gt 0 }",
        f"    http-request return status 503 content-type text/plain string unavailable if is_get {{ url -m str {HEALTH_ROUTE} }}",
    ]
    allowed = " || ".join(f"meth_{m.lower()} {r}" for m, r in zip(methods, route_names, strict=True))
    lines.append(f"    http-request deny deny_status 404 unless {allowed}")
    if spec.keyed:
        lines += [
            "    http-request deny deny_status 401 unless { req.hdr_cnt(authorization) eq 1 } "
            f"{{ req.fhdr(authorization),sha2(256),hex,lower -m str -f {KEYS_PATH} }}",
        ]
    lines += [
        "    http-request set-header Host upstream",  # the engine never sees the client's Host
        "    http-response del-header server",
        "    default_backend engine",
    ]
    return lines


def haproxy_config(spec: GatewaySpec) -> str:
    """The whole haproxy.cfg for `spec` (no stats page, no admin socket, no key)."""
    b = spec.bounds
    lines = [
        "global",
        f"    maxconn {b.max_connections}",
        f"    tune.bufsize {b.max_header_bytes}",
        "    tune.http.maxhdr 64",
        "    log stdout format raw local0 info",
        "",
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
        "",
        *_frontend(spec),
        "",
        "backend engine",
        "    option httpchk GET /health",
        "    http-check expect status 200",
        f"    server engine {spec.upstream_host}:{spec.upstream_port} check inter 2s fall 2 rise 1 maxconn {b.max_connections}",
        "",
    ]
    return "\n".join(lines)


def gateway_for(rank: RankSpec, keyed: bool, embeddings: bool = False) -> GatewaySpec | None:
    """The gateway that takes a fronted rank's place: the API's address and port, the engine on
    127.0.0.1:<internal port> behind it (the address the plan already moved it to)."""
    if rank.front is None:
        return None
    f = rank.front
    return GatewaySpec(rank.node, f.listen, f.port, LOOPBACK, f.upstream, routes_for(embeddings), keyed)


def plan_gateways(plan: Plan, keyed: bool, embeddings: bool = False) -> list[GatewaySpec]:
    """One gateway per fronted listener of the plan: the router's, and each group's rank 0 (a
    replica head listens where the router reaches it, which may be its node's LAN address)."""
    ranks = [*([plan.router] if plan.router is not None else []), *plan.ranks]
    return [g for r in ranks if (g := gateway_for(r, keyed, embeddings)) is not None]


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
