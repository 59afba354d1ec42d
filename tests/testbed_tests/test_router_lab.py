"""The real sglang-router in front of stand-in replicas on two lab nodes (issue #19).

One stand-in engine container per node (host network, like sparkctl's engines) and the router as a
container on spark1 running `python3 -m sglang_router.launch_router` from the serving image, as
sparkctl runs it by default; the controller talks to the router over the management network and
the router to the replicas over the fabric. Also: the router as its own image, and a 4-node lab.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.testbed.images import ENGINE_TAG, ROUTER_TAG, build_router_image
from tests.testbed.lab import Lab
from tests.testbed.routerlab import (
    ENGINE_PORT,
    ROUTER_PORT,
    RouterLab,
    chat,
    replica_of,
    steady_load,
    wait_for,
)

pytestmark = pytest.mark.testbed
NODES = ("spark1", "spark2")


@pytest.fixture
def rlab(lab: Lab) -> Iterator[RouterLab]:
    """The shared 2-node lab; the test starts its replicas and router, removed afterwards."""
    setup = RouterLab(lab, tag=uuid.uuid4().hex[:6])
    try:
        yield setup
    finally:
        setup.cleanup()


def start_both(rlab: RouterLab, **env: str) -> list[str]:
    for node in NODES:
        rlab.start_engine(node, **env)
    return [rlab.engine_url(n) for n in NODES]


def test_requests_through_the_router_reach_both_replicas(rlab: RouterLab) -> None:
    client = rlab.start_router(start_both(rlab))
    assert sorted((w.url, w.healthy) for w in client.workers()) == [(rlab.engine_url(n), True) for n in NODES]
    answers = [chat(rlab.router_base()) for _ in range(8)]
    assert all(code == 200 for code, _ in answers), answers
    spread = Counter(replica_of(text) for _, text in answers)
    print(f"8 requests through the router: {dict(spread)}")
    assert spread == {"spark1": 4, "spark2": 4}  # round robin over two healthy replicas


def test_the_router_image_routes_too(rlab: RouterLab) -> None:
    build_router_image(rlab.lab.docker("spark1"))
    client = rlab.start_router(start_both(rlab), image=ROUTER_TAG, port=ROUTER_PORT + 1)
    assert {replica_of(chat(client.base_url)[1]) for _ in range(4)} == {"spark1", "spark2"}


def test_a_killed_replica_is_marked_unhealthy_and_requests_keep_succeeding(rlab: RouterLab) -> None:
    client = rlab.start_router(start_both(rlab))
    dead = rlab.engine_url("spark2")
    # a steady client through the router while the replica dies
    with steady_load(lambda: chat(rlab.router_base())) as results:
        wait_for("requests flowing", lambda: len(results) >= 4)
        rlab.lab.kill_container("spark2", rlab.name(f"engine-spark2-{ENGINE_PORT}"))
        killed = time.monotonic()
        listing = client.wait_for(
            "spark2 unhealthy", lambda ws: any(w.url == dead and not w.healthy for w in ws), timeout=60
        )
        print(f"router marked the killed replica unhealthy after {time.monotonic() - killed:.1f}s")
        assert [w.healthy for w in listing if w.url == rlab.engine_url("spark1")] == [True]
        after = len(results)
        wait_for("requests after the replica was taken out", lambda: len(results) >= after + 6)
    failed = [r for r in results if r[0] != 200]
    print(f"{len(results)} requests during the kill, {len(failed)} failed")
    assert not failed, failed[:3]  # the router retries a refused request on the other replica
    assert {replica_of(text) for _, text in results[after:]} == {"spark1"}


@pytest.mark.parametrize("policy", ["round_robin", "cache_aware"])
def test_a_removed_replica_finishes_its_in_flight_requests(rlab: RouterLab, policy: str) -> None:
    """DELETE /workers/<id> takes the replica out of rotation at once and does not cut the
    requests it is serving (what the rolling switch's drain relies on)."""
    client = rlab.start_router(start_both(rlab, STANDIN_GEN_DELAY="3"), policy=policy)
    out = rlab.engine_url("spark2")
    with ThreadPoolExecutor(2) as pool:
        # one per replica (distinct prompts: cache_aware sends a repeated one to the same replica)
        in_flight = [pool.submit(chat, rlab.router_base(), 30, False, p) for p in ("alpha", "beta")]
        wait_for("a request in flight on each replica", lambda: all(rlab.in_flight(n) for n in NODES))
        assert client.remove(out)
        client.wait_for("spark2 out", lambda ws: all(w.url != out for w in ws), timeout=10)
        assert not any(f.done() for f in in_flight)  # out of rotation while its request still runs
        answers = [f.result() for f in in_flight]
    assert sorted(replica_of(text) for code, text in answers if code == 200) == ["spark1", "spark2"]
    assert {replica_of(chat(rlab.router_base(), prompt=f"after {i}")[1]) for i in range(2)} == {"spark1"}


def test_a_four_node_lab_comes_up_and_every_node_reaches_the_others(make_lab) -> None:
    started = time.monotonic()
    four = make_lab(nodes=4, engine_image=False)
    up_s = time.monotonic() - started
    four.install_engine_image()
    print(f"4-node lab: up {up_s:.1f}s, engine image on all nodes {time.monotonic() - started - up_s:.1f}s")
    assert len({four.docker(n).images.get(ENGINE_TAG).id for n in four.nodes}) == 1
    size = four.mtu - 28  # ICMP payload filling the fabric MTU, don't-fragment
    for src in four.nodes:
        for dst in four.nodes:
            if dst is src:
                continue
            ping = four.exec(
                src, ["ping", "-M", "do", "-s", str(size), "-c1", "-W2", dst.fabric_ip], check=False
            )
            assert ping.returncode == 0, f"{src.name} -> {dst.name}: {ping.stdout}{ping.stderr}"
            # node-to-node SSH over the fabric, as rank 0 logs in to its peers
            ssh = four.exec(src, ["ssh", "-o", "BatchMode=yes", dst.fabric_ip, "hostname"], check=False)
            assert (ssh.returncode, ssh.stdout.strip()) == (0, dst.name), (
                f"{src.name} -> {dst.name}: {ssh.stderr}"
            )
