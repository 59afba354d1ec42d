"""The real sglang-router in front of stand-in replicas on two lab nodes (issue #19).

One stand-in engine container per node (host network, like sparkctl's engines) and the router as a
container on spark1 running `python3 -m sglang_router.launch_router` from the serving image, as
sparkctl runs it by default; the controller talks to the router over the management network and
the router to the replicas over the fabric. Also: the router as its own image, and a 4-node lab.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pytest

from sparkctl.cluster_http import OPENER
from sparkctl.router.client import RouterClient
from tests.testbed.images import ENGINE_TAG, ROUTER_TAG, build_router_image
from tests.testbed.lab import Lab

pytestmark = pytest.mark.testbed
ENGINE_PORT = 31100
ROUTER_PORT = 31190
# Fast health checking so a dead replica is noticed within seconds (the router's default is 60 s).
HEALTH_FLAGS = ["--health-check-interval-secs", "1", "--health-failure-threshold", "2"]
HEALTH_FLAGS += ["--health-success-threshold", "1", "--worker-startup-check-interval", "1"]


def chat(base: str, timeout: float = 30) -> tuple[int, str]:
    """(HTTP status, answer text or error) of one chat request through the router."""
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    req = urllib.request.Request(base + "/v1/chat/completions", data=body, method="POST")
    req.add_header("Content-Type", "application/json")
    try:
        with OPENER.open(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())["choices"][0]["message"]["content"]
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")[:200]
    except OSError as exc:
        return -1, repr(exc)


def replica_of(answer: str) -> str:
    """The stand-in names its replica in every answer: '... (replica=spark2).'"""
    return answer.split("replica=", 1)[1].split(")", 1)[0] if "replica=" in answer else "?"


def wait_for(what: str, cond: Callable[[], object], timeout: float = 60, interval: float = 0.1) -> object:
    deadline = time.monotonic() + timeout
    while not (value := cond()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(interval)
    return value


@dataclass
class RouterLab:
    lab: Lab
    tag: str
    containers: list = field(default_factory=list)

    def engine_url(self, node: str) -> str:
        return f"http://{self.lab.node(node).fabric_ip}:{ENGINE_PORT}"

    @property
    def router_base(self) -> str:
        return f"http://{self.lab.node('spark1').mgmt_ip}:{ROUTER_PORT}"

    def run(self, node: str, name: str, argv: list[str], image: str = ENGINE_TAG, **env: str):
        container = self.lab.docker(node).containers.run(
            image,
            argv,
            name=f"rl-{name}-{self.tag}",
            network_mode="host",
            detach=True,
            environment=env,
            labels={"sparkctl-test": "router-lab"},
        )
        self.containers.append(container)
        return container

    def start_engine(self, node: str, **env: str):
        argv = ["python3", "-m", "sglang.launch_server", "--model-path", "/models/m"]
        argv += ["--served-model-name", "m", "--host", "0.0.0.0", "--port", str(ENGINE_PORT)]
        return self.run(node, f"engine-{node}", argv, STANDIN_REPLICA=node, **env)

    def start_router(self, image: str = ENGINE_TAG, port: int = ROUTER_PORT) -> RouterClient:
        argv = ["python3", "-m", "sglang_router.launch_router", "--host", "0.0.0.0", "--port", str(port)]
        argv += ["--worker-urls", self.engine_url("spark1"), self.engine_url("spark2")]
        argv += ["--policy", "round_robin", *HEALTH_FLAGS]
        self.run("spark1", f"router-{port}", argv, image=image)
        base = f"http://{self.lab.node('spark1').mgmt_ip}:{port}"
        client = RouterClient(base, timeout=2)
        urls = {self.engine_url("spark1"), self.engine_url("spark2")}
        wait_for("the router to list both replicas healthy", lambda: urls <= healthy_urls(client))
        return client

    def cleanup(self) -> None:
        for container in self.containers:
            container.remove(force=True)


def healthy_urls(client: RouterClient) -> set[str]:
    try:
        return {w.url for w in client.workers() if w.healthy}
    except Exception:  # router still starting: not listening yet
        return set()


@pytest.fixture
def rlab(lab: Lab) -> Iterator[RouterLab]:
    """A stand-in replica on each of the shared lab's two nodes; the test starts the router."""
    setup = RouterLab(lab, tag=uuid.uuid4().hex[:6])
    try:
        for node in ("spark1", "spark2"):
            setup.start_engine(node)
        yield setup
    finally:
        setup.cleanup()


def test_requests_through_the_router_reach_both_replicas(rlab: RouterLab) -> None:
    client = rlab.start_router()
    listing = client.workers()
    assert sorted((w.url, w.healthy) for w in listing) == sorted(
        (rlab.engine_url(n), True) for n in ("spark1", "spark2")
    )
    answers = [chat(rlab.router_base) for _ in range(8)]
    assert all(code == 200 for code, _ in answers), answers
    spread = Counter(replica_of(text) for _, text in answers)
    print(f"8 requests through the router: {dict(spread)}")
    assert spread == {"spark1": 4, "spark2": 4}  # round robin over two healthy replicas


def test_the_router_image_routes_too(rlab: RouterLab) -> None:
    build_router_image(rlab.lab.docker("spark1"))
    client = rlab.start_router(image=ROUTER_TAG, port=ROUTER_PORT + 1)
    base = client.base_url
    assert {replica_of(chat(base)[1]) for _ in range(4)} == {"spark1", "spark2"}


def test_a_killed_replica_is_marked_unhealthy_and_requests_keep_succeeding(rlab: RouterLab) -> None:
    client = rlab.start_router()
    dead = rlab.engine_url("spark2")
    results: list[tuple[int, str]] = []
    stop = threading.Event()

    def load() -> None:  # a steady client through the router while the replica dies
        while not stop.is_set():
            results.append(chat(rlab.router_base))

    loader = threading.Thread(target=load, daemon=True)
    loader.start()
    try:
        wait_for("requests flowing", lambda: len(results) >= 4)
        rlab.lab.kill_container("spark2", f"rl-engine-spark2-{rlab.tag}")
        killed = time.monotonic()
        listing = client.wait_for(
            "spark2 unhealthy", lambda ws: any(w.url == dead and not w.healthy for w in ws), timeout=60
        )
        print(f"router marked the killed replica unhealthy after {time.monotonic() - killed:.1f}s")
        assert [w.healthy for w in listing if w.url == rlab.engine_url("spark1")] == [True]
        after = len(results)
        wait_for("requests after the replica was taken out", lambda: len(results) >= after + 6)
    finally:
        stop.set()
        loader.join(60)
    failed = [r for r in results if r[0] != 200]
    print(f"{len(results)} requests during the kill, {len(failed)} failed")
    assert not failed, failed[:3]
    assert {replica_of(text) for _, text in results[after:]} == {"spark1"}


def test_a_removed_replica_finishes_its_in_flight_requests(lab: Lab) -> None:
    """DELETE /workers/<id> takes the replica out of rotation at once and does not cut the
    requests it is serving (what the rolling switch's drain relies on)."""
    setup = RouterLab(lab, tag=uuid.uuid4().hex[:6])
    try:
        for node in ("spark1", "spark2"):
            setup.start_engine(node, STANDIN_GEN_DELAY="3")
        client = setup.start_router()
        with ThreadPoolExecutor(2) as pool:
            in_flight = [pool.submit(chat, setup.router_base) for _ in range(2)]  # one per replica
            wait_for("both requests in flight", lambda: busy(setup) == {"spark1", "spark2"})
            assert client.remove(setup.engine_url("spark2"))
            client.wait_for(
                "spark2 out", lambda ws: all(w.url != setup.engine_url("spark2") for w in ws), timeout=10
            )
            assert not any(f.done() for f in in_flight)  # taken out while its request still runs
            answers = [f.result() for f in in_flight]
        assert sorted(replica_of(text) for code, text in answers if code == 200) == ["spark1", "spark2"]
        assert {replica_of(chat(setup.router_base)[1]) for _ in range(2)} == {"spark1"}
    finally:
        setup.cleanup()


def busy(setup: RouterLab) -> set[str]:
    """Replicas whose stand-in has begun a generation request (`STANDIN_GEN begin` in its log)."""
    seen = set()
    for node in ("spark1", "spark2"):
        logs = setup.lab.docker(node).containers.get(f"rl-engine-{node}-{setup.tag}").logs().decode()
        if "STANDIN_GEN begin" in logs:
            seen.add(node)
    return seen


def test_a_four_node_lab_comes_up_and_every_node_reaches_the_others(make_lab) -> None:
    started = time.monotonic()
    four = make_lab(nodes=4, engine_image=False)
    up_s = time.monotonic() - started
    four.install_engine_image()
    image_s = time.monotonic() - started - up_s
    print(f"4-node lab: up {up_s:.1f}s, engine image on all nodes {image_s:.1f}s")
    ids = {four.docker(n).images.get(ENGINE_TAG).id for n in four.nodes}
    assert len(ids) == 1
    size = four.mtu - 28  # ICMP payload filling the fabric MTU, don't-fragment
    for src in four.nodes:
        for dst in four.nodes:
            if src is dst:
                continue
            ping = four.exec(
                src, ["ping", "-M", "do", "-s", str(size), "-c1", "-W2", dst.fabric_ip], check=False
            )
            assert ping.returncode == 0, f"{src.name} -> {dst.name}: {ping.stdout}{ping.stderr}"
        peers = [n.fabric_ip for n in four.nodes if n is not src]
        for ip in peers:  # node-to-node SSH over the fabric, as rank 0 logs in to its peers
            ssh = four.exec(src, ["ssh", "-o", "BatchMode=yes", ip, "hostname"], check=False)
            assert ssh.returncode == 0, f"{src.name} -> {ip}: {ssh.stderr}"
