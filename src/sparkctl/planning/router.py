"""The router's container in a plan: sglang-router's launch argv, rendered from the profile.

Pure, like plan.py. The router listens on engine.port (the user's one endpoint) on `router.node`
and starts with every replica's URL; a rolling switch then adds and removes replicas through its
worker API (clients/router.py), so the worker set is not part of the router's config hash, and
neither is the serving image it runs from when `router.image` is unset (an image upgrade rolls the
replicas and keeps the router).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from typing import TYPE_CHECKING

from sparkctl.engines.base import Readiness
from sparkctl.errors import ProfileError, UsageError
from sparkctl.planning import hardening as sec
from sparkctl.planning.gateway import gateway_spec
from sparkctl.planning.model import LABEL_PREFIX
from sparkctl.secrets import SecretFile

if TYPE_CHECKING:
    from sparkctl.planning.model import GroupSpec, RankSpec
    from sparkctl.profile.schema import Profile

# The router's endpoint: /v1/models answers 200 once a worker is in (503 "No models available"
# with none), and names the model from a worker's /server_info `served_model_name`, which each
# replica's gateway answers from the plan (planning/gateway.py router_answers); with
# engine.gateway off a worker whose engine has no /server_info is listed as "unknown". So the name is
# not judged here (Readiness.names_served): it is checked on every replica's own endpoint.
READINESS = Readiness(names_served=False)
ROUTER_KEY_FILE = f"{sec.SECRETS_DIR}/sparkctl-router-key"
ROLE_LABEL = f"{LABEL_PREFIX}role"
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")  # hosts only this node reaches (sec.LOOPBACK: what binds)
# What sglang-router 0.3.2 answers without its key (measured, docs/security.md): every worker's
# Prometheus text, which it fetches *with* the key, and its own summary. Its gateway's route
# allowlist keeps both on the router's node.
PRIVATE_ROUTES = ("/engine_metrics", "/get_server_info")
# The worker API the rolling switch drives (clients/router.py), passed by the router's gateway
# with the key (the router checks it too). A key holder can change the worker set through it:
# docs/security.md says so.
WORKER_ROUTES = (("GET", "/workers"), ("POST", "/workers"), ("DELETE", "~^/workers/[A-Za-z0-9_.:-]+$"))

# sglang-router 0.3.2 takes its API key only as --api-key. This launcher reads it from the secret
# file and appends it in-process, so it never reaches a process list, `docker inspect` or a log.
_KEY_LAUNCHER = (
    "import runpy, sys; key = open(sys.argv[1]).read().strip(); "
    "sys.argv = [sys.argv[2], *sys.argv[3:], '--api-key', key]; "
    "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)"
)


def router_container_name(cluster: str) -> str:
    return f"sparkctl-{cluster}-router"


def worker_urls(router_node_name: str, groups: list[GroupSpec]) -> list[str]:
    """Each replica's URL as the router reaches it; a replica bound to loopback must share its node."""
    urls = []
    for g in groups:
        if g.worker_host is None and g.endpoint.host in LOOPBACK_NAMES and g.head_node != router_node_name:
            raise UsageError(
                f"replica {g.index} listens on {g.endpoint.host} on node {g.head_node}, which the "
                f"router on node {router_node_name} cannot reach",
                fix="give the nodes SSH addresses the nodes reach each other at, or set engine.host",
            )
        urls.append(g.worker_url)
    return urls


def _command(profile: Profile) -> list[str]:
    cmd = list(profile.router.command)
    if profile.engine.api_key is None:
        return cmd
    if len(cmd) != 3 or cmd[1] != "-m":
        raise ProfileError(
            "router.command: must be `<python> -m <module>` when engine.api_key is set",
            fix="sparkctl hands the key to the router in-process (never on its command line); "
            "use the default python3 -m sglang_router.launch_router",
        )
    return [cmd[0], "-c", _KEY_LAUNCHER, ROUTER_KEY_FILE, cmd[2]]


def router_argv(profile: Profile, host: str, urls: list[str], port: int | None = None) -> list[str]:
    r = profile.router
    return [
        *_command(profile),
        "--host", host,
        "--port", str(profile.engine.port if port is None else port),
        "--policy", r.policy,
        "--health-check-interval-secs", str(r.health_check_interval),
        "--health-failure-threshold", str(r.health_failure_threshold),
        "--health-success-threshold", "1",
        # Its Prometheus exporter defaults to 0.0.0.0:29000, open without a key: node-local only.
        "--prometheus-host", "127.0.0.1",
        "--prometheus-port", str(r.metrics_port),
        "--worker-urls", *urls,
    ]  # fmt: skip


def discovery_argv(
    profile: Profile,
    host: str,
    selector: dict[str, str],
    port: int,
    namespace: str,
    listen_port: int | None = None,
) -> list[str]:
    """The router's argv when Kubernetes lists the replicas (`export k8s`): the same flags, with
    `--worker-urls` replaced by sglang-router's service discovery of the ready pods of `selector`
    (whose API is on `port`); it listens on host:listen_port (default engine.port)."""
    argv = router_argv(profile, host, [], listen_port)
    return [
        *argv[: argv.index("--worker-urls")],
        "--service-discovery",
        "--selector", *(f"{k}={v}" for k, v in selector.items()),
        "--service-discovery-port", str(port),
        "--service-discovery-namespace", namespace,
    ]  # fmt: skip


def router_spec(profile: Profile, groups: list[GroupSpec], image: str) -> RankSpec:
    from sparkctl.planning.model import RankSpec
    from sparkctl.profile.derived import node_path

    node_name = profile.router.node or groups[0].head_node
    node = profile.node(node_name)
    urls = worker_urls(node_name, groups)
    host, port = sec.bind_host(profile, node, 0), profile.engine.port
    ref = None
    if profile.engine.api_key is not None:
        ref = sec.secret_ref("api-key", profile.engine.api_key, node, profile, node_path)
    gate = gateway_spec(profile, node_name, 0, host, port, ref, WORKER_ROUTES)
    if gate is not None:  # the router on 127.0.0.1, its gateway on the endpoint clients hold
        host, port = gate.upstream_host, gate.upstream_port
    argv = router_argv(profile, host, urls, port)
    secrets = [SecretFile(ROUTER_KEY_FILE, ref)] if ref is not None else []
    # As the node user: its key file is theirs (0400) and the container has no DAC_OVERRIDE, so
    # root in it could not read the file of a node user who is not root.
    options = sec.RunOptions(shm_size="64m", gpus=None, user="node")
    spec_image = profile.router.image or image
    # The worker set is not hashed (changed through the API), nor the serving image the router
    # borrows when router.image is unset: a new image.ref restarts replicas one at a time
    # (rolling upgrade) and keeps the running router, the one endpoint clients hold.
    hashed = {"image": profile.router.image, "argv": argv[: argv.index("--worker-urls")]}
    material = {**hashed, "options": asdict(options)}
    digest = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:12]
    labels = {
        f"{LABEL_PREFIX}cluster": profile.cluster,
        ROLE_LABEL: "router",
        f"{LABEL_PREFIX}node": node_name,
        f"{LABEL_PREFIX}config_hash": digest,
    }
    return RankSpec(
        rank=-1,
        node=node_name,
        container_name=router_container_name(profile.cluster),
        image=spec_image,
        argv=argv,
        env={},
        mounts=[],
        options=options,
        labels=labels,
        gpus=0,
        secrets=secrets,
        group=-1,
        node_rank=0,
        role="router",
        gateway=gate,
    )
