"""Preflight's pairwise checks on a real 4-node lab: which pairs are probed for tp4 / tp2x2 / dp4,
that a fault is pinned to exactly its pairs, and that the controller pays one SSH session and one
remote command per node (counted in each node's own sshd log), not one per pair.

Faults are real: a node's fabric MTU at 1500, an iptables rule in a node's namespace that drops
its traffic to one peer. The lab is built once for the module (no engine image: nothing starts).
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import require_testbed
from tests.testbed.lab import Lab
from tests.testbed.profiles import write_lab_profile

pytestmark = pytest.mark.testbed
NODES = ["spark1", "spark2", "spark3", "spark4"]
FABRIC = "SshRank0ToPeer,FabricNetdev,Mtu,PingDf,HostIpReachable,RouterReach"
MODES = {
    "tp4": {"nodes": NODES, "tp": 4, "default": True},
    "tp2x2": {"nodes": NODES, "tp": 2, "replicas": 2},
    "dp4": {"nodes": NODES, "tp": 1, "replicas": 4},
}


@pytest.fixture(scope="module")
def quad() -> Iterator[Lab]:
    require_testbed()
    with Lab(nodes=4) as lab:
        yield lab


@pytest.fixture
def profile(quad: Lab, tmp_path: Path) -> Path:
    return write_lab_profile(quad, tmp_path / "quad.yaml", modes=MODES)


def preflight(profile: Path, mode: str, only: str = FABRIC) -> tuple[int, dict]:
    argv = [sys.executable, "-m", "sparkctl", "preflight", mode, "-p", str(profile), "--json", "--only", only]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def pairs(report: dict, check: str, severity: str | None = None) -> set[tuple[str, str]]:
    return {
        (f["data"]["src"], f["data"]["dst"])
        for f in report["findings"]
        if f["check"] == check and (severity is None or f["severity"] == severity)
    }


def errors(report: dict) -> list[dict]:
    return [f for f in report["findings"] if f["severity"] == "error"]


def controller_log(lab: Lab) -> dict[str, tuple[int, int]]:
    """Per node: (SSH logins, remote commands) from the controller's address, as that node's sshd
    logged them (the lab's sshd runs at LogLevel VERBOSE, which logs every exec)."""
    out = {}
    for n in lab.nodes:
        log = Path(n.data_dir, "sshd.log").read_text(errors="replace")
        src = f" for root from {lab.mgmt_host_ip} port "
        out[n.name] = (log.count(f"Accepted publickey{src}"), log.count(f"Starting session: command{src}"))
    return out


def spent(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]
) -> dict[str, tuple[int, int]]:
    return {n: (after[n][0] - before[n][0], after[n][1] - before[n][1]) for n in after}


@contextmanager
def dropped(lab: Lab, node: str, dst_ip: str, reject: bool = False) -> Iterator[None]:
    """`node` cannot send to dst_ip (an iptables rule in the node's own namespace): a broken path."""
    rule = ["OUTPUT", "-d", f"{dst_ip}/32", "-j", "REJECT" if reject else "DROP"]
    rule += ["--reject-with", "icmp-host-unreachable"] if reject else []
    ipt = ["nsenter", f"--net={lab.node(node).netns_path}", "iptables"]
    subprocess.run([*ipt, "-I", *rule], check=True, capture_output=True)
    try:
        yield
    finally:
        subprocess.run([*ipt, "-D", *rule], check=True, capture_output=True)


ALL_DIRECTED = {(a, b) for a in NODES for b in NODES if a != b}


def test_tp4_every_pair_passes_at_one_session_per_node(quad: Lab, profile: Path) -> None:
    before = controller_log(quad)
    rc, report = preflight(profile, "tp4")
    cost = spent(before, controller_log(quad))
    assert rc == 0, errors(report)
    # All 6 pairs, both directions (12 DF pings), each named by its two ends; SSH from rank 0.
    assert pairs(report, "PingDf", "ok") == ALL_DIRECTED
    assert pairs(report, "SshRank0ToPeer", "ok") == {("spark1", n) for n in NODES[1:]}
    assert all(
        "DF ping at MTU 9000 passes" in f["message"] for f in report["findings"] if f["check"] == "PingDf"
    )
    # The controller opened ONE session and ran ONE remote command per node (the node's probe
    # batch carries its pings to its 3 peers and, on rank 0, its 3 SSH probes): N, not N^2.
    assert cost == {n: (1, 1) for n in NODES}, cost
    assert sum(s for _, s in cost.values()) == len(NODES)


def test_tp4_node_at_mtu_1500_fails_exactly_its_pairs(quad: Lab, profile: Path) -> None:
    quad.set_mtu("spark4", 1500)
    try:
        before = controller_log(quad)
        rc, report = preflight(profile, "tp4")
        cost = spent(before, controller_log(quad))
    finally:
        quad.set_mtu("spark4", quad.mtu)
    assert rc == 1
    bad = {(a, "spark4") for a in NODES[:3]} | {("spark4", a) for a in NODES[:3]}
    assert pairs(report, "PingDf", "error") == bad
    assert pairs(report, "PingDf", "ok") == ALL_DIRECTED - bad
    for f in (f for f in errors(report) if f["check"] == "PingDf"):
        src, dst = f["data"]["src"], f["data"]["dst"]
        assert (
            f["message"].startswith(f"{src} -> {dst} (")
            and "DF ping at MTU 9000 fails (path MTU 1500?" in f["message"]
        ), f["message"]
        assert "small packets pass" in f["message"]
        # The fix names the end that is short, whichever side sent.
        assert "mtu 9000` on spark4 (it is at 1500)" in f["fix"] and "on spark1" not in f["fix"], f["fix"]
    (mtu,) = [f for f in errors(report) if f["check"] == "Mtu"]
    assert mtu["node"] == "spark4"
    assert {f["check"] for f in errors(report)} == {"PingDf", "Mtu"}
    assert cost == {n: (1, 1) for n in NODES}, cost


def test_tp2x2_probes_only_pairs_inside_each_group(quad: Lab, profile: Path) -> None:
    """spark1 and spark3 cannot reach each other over the fabric: fatal for tp4 (named, and only
    that pair), irrelevant for tp2x2, whose groups (spark1, spark2) and (spark3, spark4) never talk."""
    with dropped(quad, "spark1", quad.node("spark3").fabric_ip):
        rc, report = preflight(profile, "tp2x2")
        rc4, report4 = preflight(profile, "tp4", only="PingDf,SshRank0ToPeer")
    assert rc == 0, errors(report)
    inside = {("spark1", "spark2"), ("spark2", "spark1"), ("spark3", "spark4"), ("spark4", "spark3")}
    assert pairs(report, "PingDf") == pairs(report, "PingDf", "ok") == inside
    assert pairs(report, "SshRank0ToPeer") == {("spark1", "spark2"), ("spark3", "spark4")}
    # tp4 over the same fabric: exactly the broken pair fails, both ways, as "no path".
    assert rc4 == 1
    assert pairs(report4, "PingDf", "error") == {("spark1", "spark3"), ("spark3", "spark1")}
    assert all("no path" in f["message"] for f in errors(report4) if f["check"] == "PingDf")
    assert pairs(report4, "SshRank0ToPeer", "error") == {("spark1", "spark3")}


def test_router_reaches_every_replica_head_and_names_the_one_it_cannot(quad: Lab, profile: Path) -> None:
    rc, report = preflight(profile, "dp4")
    assert rc == 0, errors(report)
    # The router (on spark1, replica 0's head) tests the path to the other three heads; one solo
    # replica per node: no fabric pair at all.
    assert pairs(report, "RouterReach", "ok") == {("spark1", n) for n in NODES[1:]}
    assert not pairs(report, "PingDf") and not pairs(report, "SshRank0ToPeer")
    spark3 = quad.node("spark3")
    with dropped(quad, "spark1", spark3.mgmt_ip, reject=True):
        rc, report = preflight(profile, "dp4")
    assert rc == 1
    (err,) = errors(report)
    assert err["check"] == "RouterReach" and err["node"] == "spark1"
    assert err["message"].startswith(f"spark1 -> replica 2 on spark3 ({spark3.mgmt_ip}:30001): not reachable")
    assert f"http://{spark3.mgmt_ip}:30001" in err["fix"]
    assert pairs(report, "RouterReach", "ok") == {("spark1", "spark2"), ("spark1", "spark4")}


def test_router_on_a_node_without_ranks_is_checked_for_its_paths_only(quad: Lab, tmp_path: Path) -> None:
    modes = {"dp2": {"nodes": ["spark3", "spark4"], "tp": 1, "replicas": 2, "default": True}}
    prof = write_lab_profile(quad, tmp_path / "p.yaml", modes=modes, router={"node": "spark1"})
    before = controller_log(quad)
    rc, report = preflight(prof, "dp2")
    cost = spent(before, controller_log(quad))
    assert rc == 0, errors(report)
    assert report["nodes"] == ["spark3", "spark4", "spark1"]
    assert pairs(report, "RouterReach", "ok") == {("spark1", "spark3"), ("spark1", "spark4")}
    # One session per node the mode uses (the router's included; none on spark2). dp2 has no fabric
    # pair, so only the router's node has targets: its one command; the heads run none.
    assert {n: c for n, c in cost.items() if c != (0, 0)} == {
        "spark1": (1, 1),
        "spark3": (1, 0),
        "spark4": (1, 0),
    }
    rc, report = preflight(prof, "dp2", only=f"SshReachable,{FABRIC},DockerEngine,PortFree")
    assert rc == 0, errors(report)
    on_router = {f["check"] for f in report["findings"] if f["node"] == "spark1"}
    assert on_router == {"SshReachable", "RouterReach", "DockerEngine", "PortFree"}  # no engine checks
    ports = [f["message"] for f in report["findings"] if f["check"] == "PortFree" and f["node"] == "spark1"]
    assert sorted(ports) == [
        "router (behind the gateway) port 20000 free",  # sglang-router's own, behind its gateway
        "router HTTP port 30000 free",
    ]


def test_router_image_missing_on_its_node_is_an_error_until_it_is_there(quad: Lab, tmp_path: Path) -> None:
    modes = {"dp2": {"nodes": ["spark3", "spark4"], "tp": 1, "replicas": 2, "default": True}}
    router = {"node": "spark1", "image": "router/test:1"}
    prof = write_lab_profile(quad, tmp_path / "p.yaml", modes=modes, router=router)
    rc, report = preflight(prof, "dp2", only="RouterImage")
    assert rc == 1
    (err,) = errors(report)
    assert err["check"] == "RouterImage" and err["node"] == "spark1"
    assert err["message"] == "router image router/test:1 not on spark1"
    assert "`docker pull router/test:1` on spark1" in err["fix"]
    client = quad.docker("spark1")
    client.images.build(
        fileobj=io.BytesIO(b"FROM scratch\nLABEL role=router\n"), tag="router/test:1", rm=True
    )
    try:
        rc, report = preflight(prof, "dp2", only="RouterImage")
    finally:
        client.images.remove("router/test:1", force=True)
    assert rc == 0, errors(report)
    assert [(f["node"], f["severity"]) for f in report["findings"] if f["check"] == "RouterImage"] == [
        ("spark1", "ok")
    ]


def test_a_busy_port_on_the_second_replicas_head_is_found(quad: Lab, profile: Path) -> None:
    """tp2x2: replica 1's head is spark3, not rank 0 of the mode; its API port is checked there."""
    listen = "import socket, time; s = socket.socket(); s.bind(('0.0.0.0', 30001)); s.listen(); print('ready', flush=True); time.sleep(300)"
    argv = ["nsenter", f"--net={quad.node('spark3').netns_path}", sys.executable, "-c", listen]
    holder = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        rc, report = preflight(profile, "tp2x2", only="PortFree")
    finally:
        holder.kill()
        holder.wait()
    assert rc == 1
    (busy,) = errors(report)
    assert (
        busy["node"] == "spark3" and busy["message"] == "replica 1 HTTP port 30001 already in use on spark3"
    )
    free = {(f["node"], f["message"]) for f in report["findings"] if f["severity"] == "ok"}
    assert free == {
        ("spark1", "replica 0 HTTP port 30001 free"),
        ("spark1", "replica 0 engine (behind the gateway) port 20001 free"),
        ("spark1", "replica 0 dist-init port 50051 free"),
        ("spark1", "router HTTP port 30000 free"),
        ("spark1", "router (behind the gateway) port 20000 free"),
        ("spark3", "replica 1 engine (behind the gateway) port 20001 free"),
        ("spark3", "replica 1 dist-init port 50051 free"),
    }
