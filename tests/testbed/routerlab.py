"""The real sglang-router in front of stand-in replicas on lab nodes (tests and bench/router_facts.py).

Engines are stand-in containers on the host network of their node, named replicas
(`STANDIN_REPLICA=<node>`); the router is a container on a node running
`python3 -m sglang_router.launch_router` from the serving image (or the router image), reaching the
replicas over the fabric; the controller reaches the router over the management network.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sparkctl.clients.router import RouterClient, RouterError
from sparkctl.cluster_http import OPENER
from tests.testbed.images import ENGINE_TAG
from tests.testbed.lab import Lab

ENGINE_PORT = 31100
ROUTER_PORT = 31190
# Fast health checking so a dead replica is noticed within seconds (the router's default is 60 s).
HEALTH_FLAGS = ["--health-check-interval-secs", "1", "--health-failure-threshold", "2"]
HEALTH_FLAGS += ["--health-success-threshold", "1", "--worker-startup-check-interval", "1"]


def chat(
    base: str,
    timeout: float = 30,
    stream: bool = False,
    prompt: str = "hi",
    model: str = "m",
    key: str | None = None,
) -> tuple[int, str]:
    """(HTTP status, answer text or error) of one chat request; a stream's text is its raw body."""
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "stream": stream}
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(), method="POST")
    req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with OPENER.open(req, timeout=timeout) as resp:
            raw = resp.read().decode()
            return resp.status, raw if stream else json.loads(raw)["choices"][0]["message"]["content"]
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")[:200]
    except (OSError, ValueError) as exc:  # refused, reset, truncated body
        return -1, repr(exc)


@contextlib.contextmanager
def steady_load(send: Callable[[], tuple[int, str]]) -> Iterator[list[tuple[int, str]]]:
    """One client sending back to back while the block runs; yields the (status, text) results
    so far (the list grows), and stops the client on exit."""
    results: list[tuple[int, str]] = []
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            results.append(send())

    client = threading.Thread(target=loop, daemon=True)
    client.start()
    try:
        yield results
    finally:
        stop.set()
        client.join(60)


def replica_of(answer: str) -> str:
    """The stand-in names its replica in every answer: '... (replica=spark2).'"""
    return answer.split("replica=", 1)[1].split(")", 1)[0] if "replica=" in answer else "?"


def wait_for(what: str, cond: Callable[[], Any], timeout: float = 60, interval: float = 0.1) -> Any:
    """Poll until cond() is truthy (a readiness wait, not a performance limit)."""
    deadline = time.monotonic() + timeout
    while not (value := cond()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)
    return value


def healthy_urls(client: RouterClient) -> set[str]:
    try:
        return {w.url for w in client.workers() if w.healthy}
    except RouterError:  # router still starting: not listening yet
        return set()


@dataclass
class RouterLab:
    """Stand-in replicas and routers as containers on a lab; cleanup() removes them all."""

    lab: Lab
    tag: str
    containers: list = field(default_factory=list)

    def engine_url(self, node: str, port: int = ENGINE_PORT) -> str:
        return f"http://{self.lab.node(node).fabric_ip}:{port}"

    def router_base(self, port: int = ROUTER_PORT, node: str = "spark1") -> str:
        return f"http://{self.lab.node(node).mgmt_ip}:{port}"

    def run(self, node: str, name: str, argv: list[str], image: str = ENGINE_TAG, **env: str):
        container = self.lab.docker(node).containers.run(
            image,
            argv,
            name=self.name(name),
            network_mode="host",
            detach=True,
            environment=env,
            labels={"sparkctl-test": "router-lab"},
        )
        self.containers.append(container)
        return container

    def name(self, name: str) -> str:
        return f"rl-{name}-{self.tag}"

    def start_engine(self, node: str, port: int = ENGINE_PORT, **env: str):
        argv = ["python3", "-m", "sglang.launch_server", "--model-path", "/models/m"]
        argv += ["--served-model-name", "m", "--host", "0.0.0.0", "--port", str(port)]
        return self.run(node, f"engine-{node}-{port}", argv, STANDIN_REPLICA=node, **env)

    def start_router(
        self,
        workers: list[str],
        *,
        image: str = ENGINE_TAG,
        port: int = ROUTER_PORT,
        flags: list[str] | None = None,
        wait_healthy: bool = True,
        policy: str = "round_robin",
    ) -> RouterClient:
        """Start the router on spark1 in front of worker URLs; wait until it lists them healthy."""
        argv = ["python3", "-m", "sglang_router.launch_router", "--host", "0.0.0.0", "--port", str(port)]
        argv += ["--worker-urls", *workers, "--policy", policy]
        # Its Prometheus exporter defaults to 0.0.0.0:29000; a second router on the node would panic.
        argv += ["--prometheus-port", str(port + 1000)]
        argv += HEALTH_FLAGS if flags is None else flags
        self.run("spark1", f"router-{port}", argv, image=image)
        client = RouterClient(self.router_base(port), timeout=2)
        wait_for("the router to answer", lambda: _answers(client))
        if wait_healthy:
            wait_for("the router to list its replicas healthy", lambda: set(workers) <= healthy_urls(client))
        return client

    def in_flight(self, node: str, port: int = ENGINE_PORT) -> int:
        """Generation requests the node's stand-in has begun (it logs `STANDIN_GEN begin` when
        STANDIN_GEN_DELAY is set)."""
        logs = self.lab.docker(node).containers.get(self.name(f"engine-{node}-{port}")).logs()
        return logs.decode().count("STANDIN_GEN begin")

    def cleanup(self) -> None:
        import docker.errors

        for container in self.containers:
            with contextlib.suppress(docker.errors.NotFound):  # a test removed it already
                container.remove(force=True)
        self.containers.clear()


def _answers(client: RouterClient) -> bool:
    try:
        client.workers()
    except RouterError:
        return False
    return True
