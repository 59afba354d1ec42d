"""Preflight on N nodes: which pairs each layout probes (tp4 / tp2x2 / dp4 / a router on a node
without ranks), the pure judges and parsers of what a node's batch brings back, and the ports and
containers of every replica and the router."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import yaml

from sparkctl.connectors.local import LocalConnector
from sparkctl.facts.docker import ContainerFacts, DockerFacts, ImageFacts
from sparkctl.facts.net import PingResult, TcpReach, parse_tcp_reach, path_mtu_hint, tcp_probe
from sparkctl.facts.probe import ProbeError, run_batch
from sparkctl.findings import Severity
from sparkctl.planning.build import build_plan
from sparkctl.preflight.base import Ctx, NodeFacts
from sparkctl.preflight.checks.docker import DockerEngine
from sparkctl.preflight.checks.image import check_router_image
from sparkctl.preflight.checks.pingdf import PairPing, PingDf, check_pair
from sparkctl.preflight.checks.ports import PortFree, check_stray, planned_ports
from sparkctl.preflight.checks.router import RouterReach, check_router_reach
from sparkctl.preflight.pairs import ReplicaHead, fabric_peers, pair_count, router_targets, ssh_peers
from sparkctl.preflight.registry import CHECKS, REGISTRY
from sparkctl.preflight.runner import _active, _wanted
from sparkctl.profile.load import load_profile_text

ROOT = Path(__file__).resolve().parents[3]
E, W, OK = Severity.ERROR, Severity.WARN, Severity.OK
NODES = ["spark1", "spark2", "spark3", "spark4"]


@pytest.fixture(autouse=True)
def home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))


def quad(modes: dict | None = None, router: dict | None = None, gpus: int = 1):
    doc = yaml.safe_load((ROOT / "profiles" / "quad-spark.yaml").read_text())
    doc["modes"].update(modes or {})
    doc["router"].update(router or {})
    doc["nodes"][0]["gpus"] = gpus
    return load_profile_text(yaml.safe_dump(doc), "p.yaml")


def ctx(profile, mode: str) -> Ctx:
    return Ctx(profile, build_plan(profile, mode), frozenset(CHECKS), "/sys", REGISTRY)


def test_tp4_pairs_every_node_with_every_other_and_ssh_from_rank0() -> None:
    plan = build_plan(quad(), "tp4")
    peers = fabric_peers(plan)
    assert pair_count(peers) == 6
    assert peers == {n: [m for m in NODES if m != n] for n in NODES}
    assert ssh_peers(plan) == {"spark1": ["spark2", "spark3", "spark4"]}
    assert router_targets(plan) == []


def test_tp2x2_pairs_stay_inside_each_group() -> None:
    plan = build_plan(quad(), "tp2x2")
    assert fabric_peers(plan) == {
        "spark1": ["spark2"],
        "spark2": ["spark1"],
        "spark3": ["spark4"],
        "spark4": ["spark3"],
    }
    assert pair_count(fabric_peers(plan)) == 2
    assert ssh_peers(plan) == {"spark1": ["spark2"], "spark3": ["spark4"]}
    # The router runs on spark1 (group 0's head): it reaches group 1's head over the network.
    assert router_targets(plan) == [ReplicaHead(1, "spark3", "spark3.local", 8889)]


def test_dp4_has_no_fabric_pair_only_router_paths() -> None:
    c = ctx(quad(), "dp4")
    assert fabric_peers(c.plan) == {} and ssh_peers(c.plan) == {}
    assert [(h.group, h.node) for h in router_targets(c.plan)] == [
        (1, "spark2"),
        (2, "spark3"),
        (3, "spark4"),
    ]
    active = {k.name for k in _active(c)}
    assert "RouterReach" in active and not active & {"PingDf", "SshRank0ToPeer", "Mtu"}
    probes, _ = _wanted(_active(c), c, "spark1")
    assert {n for n in probes if n.startswith("router:")} == {"router:1", "router:2", "router:3"}
    assert not any(n.startswith("router:") for n in _wanted(_active(c), c, "spark2")[0])


def test_each_node_carries_only_its_own_targets_in_its_batch() -> None:
    c = ctx(quad(), "tp2x2")
    for node, peer in (("spark1", "spark2"), ("spark3", "spark4"), ("spark4", "spark3")):
        probes, _ = _wanted(_active(c), c, node)
        assert {n for n in probes if n.startswith("pingdf:")} == {f"pingdf:{peer}"}
        assert {n for n in probes if n.startswith("pingsmall:")} == {f"pingsmall:{peer}"}
    assert {n for n in _wanted(_active(c), c, "spark3")[0] if n.startswith("ssh:")} == {"ssh:spark4"}
    assert not any(n.startswith("ssh:") for n in _wanted(_active(c), c, "spark4")[0])


def test_router_on_a_node_without_ranks_runs_only_router_checks_there() -> None:
    prof = quad({"dp2": {"nodes": ["spark3", "spark4"], "replicas": 2}}, {"node": "spark1"})
    c = ctx(prof, "dp2")
    assert c.nodes == ["spark3", "spark4"] and c.router_only == "spark1"
    assert [h.node for h in router_targets(c.plan)] == ["spark3", "spark4"]
    on_router = {REGISTRY[k.name].name for k in _active(c) if c.covers(k, "spark1")}
    # The router's paths, its port, container and image, the Docker engine it runs on; no GPU,
    # serving-image or weights checks where no engine runs.
    assert on_router == {
        "SshReachable",
        "RouterReach",
        "DockerEngine",
        "PortFree",
        "StrayContainers",
        "RouterImage",
        "GatewayImage",  # the router's API is behind a gateway on its node
    }
    probes, tasks = _wanted(_active(c), c, "spark1")
    assert set(probes) == {"router:0", "router:1", "ports"}
    gateway_image = c.plan.router.gateway.image
    assert set(tasks) == {"docker", "containers", f"image:{c.plan.ranks[0].image}", f"image:{gateway_image}"}
    assert planned_ports(c.plan)["spark1"] == {8888: "router HTTP", 18888: "router (behind the gateway)"}


def test_router_image_is_checked_where_image_present_does_not_cover_it() -> None:
    # The router on replica 0's head, from the serving image: ImagePresent covers that node.
    assert "RouterImage" not in {k.name for k in _active(ctx(quad(), "dp4"))}
    # Its own image: checked on its node only.
    c = ctx(quad(router={"image": "lmsys/sglang-router:0.3.2"}), "dp4")
    assert "RouterImage" in {k.name for k in _active(c)}
    assert "image:lmsys/sglang-router:0.3.2" in _wanted(_active(c), c, "spark1")[1]
    assert not any(t.startswith("image:lmsys") for t in _wanted(_active(c), c, "spark2")[1])


def test_router_image_finding_names_the_node_and_the_way_to_get_it() -> None:
    img = ImageFacts(ref="r:1", id="sha256:" + "a" * 64, size=1)
    ok = check_router_image("spark1", "r:1", img, serving=False)
    assert ok.severity == OK and ok.message == f"router image r:1 {img.id[:19]}"
    serving = check_router_image("spark5", "sparkctl/engine:1", None, serving=True)
    assert serving.severity == E and serving.node == "spark5"
    assert serving.message == "router image sparkctl/engine:1 not on spark5"
    assert "sparkctl ship --image --to spark5" in serving.fix
    own = check_router_image("spark1", "lmsys/sglang-router:0.3.2", None, serving=False)
    assert "docker pull lmsys/sglang-router:0.3.2` on spark1" in own.fix


def test_replicas_sharing_a_box_are_one_node_with_no_pair() -> None:
    prof = quad({"two": {"nodes": ["spark1"], "replicas": 2}}, gpus=2)
    c = ctx(prof, "two")
    assert c.plan.nodes == ["spark1", "spark1"] and c.nodes == ["spark1"]
    assert fabric_peers(c.plan) == {} and router_targets(c.plan) == []


def ping(sent: int, received: int, error: str | None = None) -> PingResult:
    return PingResult(0 if received else 1, sent, received, error)


def test_a_passing_pair_names_both_ends() -> None:
    f = check_pair(PairPing("spark1", "spark2", "10.0.0.2", 9000, ping(2, 2), ping(1, 1)), {})
    assert (
        f.severity is OK
        and f.message == "spark1 -> spark2 (10.0.0.2): DF ping at MTU 9000 passes (2/2 replies)"
    )
    assert (f.node, f.data["src"], f.data["dst"], f.data["size"]) == ("spark1", "spark1", "spark2", 8972)


def test_a_short_receiver_is_named_even_when_the_sender_sees_only_loss() -> None:
    p = PairPing("spark3", "spark4", "10.0.0.4", 9000, ping(2, 0, "100% packet loss"), ping(1, 1))
    f = check_pair(p, {"spark3": ("enp1s0f1np1", 9000), "spark4": ("enp1s0f1np1", 1500)})
    assert f.severity is E
    assert (
        f.message
        == "spark3 -> spark4 (10.0.0.4): DF ping at MTU 9000 fails (path MTU 1500?; small packets pass)"
    )
    assert "`sudo ip link set dev enp1s0f1np1 mtu 9000` on spark4 (it is at 1500)" in f.fix
    assert "spark3" not in f.fix and f.data["path_mtu"] == 1500 and f.data["no_path"] is False


def test_the_senders_local_error_gives_the_path_mtu() -> None:
    p = PairPing("spark4", "spark1", "10.0.0.1", 9000, ping(2, 0, "message too long, mtu=1500"), ping(1, 1))
    f = check_pair(p, {})
    assert "(path MTU 1500?; small packets pass)" in f.message and f.data["path_mtu"] == 1500


def test_both_ends_at_full_mtu_points_at_the_switch() -> None:
    p = PairPing("spark1", "spark2", "10.0.0.2", 9000, ping(2, 0, "100% packet loss"), ping(1, 1))
    f = check_pair(p, {"spark1": ("eth1", 9000), "spark2": ("eth1", 9000)})
    assert "(path MTU below 9000?; small packets pass)" in f.message
    assert "switch port or bridge between spark1 and spark2" in f.fix and "jumbo" in f.fix


def test_no_path_at_all_is_not_called_an_mtu_problem() -> None:
    p = PairPing(
        "spark1", "spark3", "10.0.0.3", 9000, ping(2, 0, "100% packet loss"), ping(1, 0, "100% packet loss")
    )
    f = check_pair(p, {})
    assert "no path: even a small ping fails" in f.message and "MTU" not in f.fix
    assert "ip route get 10.0.0.3` on spark1" in f.fix and f.data["no_path"] is True


def test_pingdf_judge_reads_each_nodes_batch() -> None:
    c = ctx(quad(), "tp2x2")
    facts = {
        "spark1": NodeFacts("spark1", values={"pingdf:spark2": ping(2, 2), "pingsmall:spark2": ping(1, 1)}),
        "spark3": NodeFacts("spark3", errors={"pingdf:spark4": ProbeError("probe batch on spark3 failed")}),
    }
    ok, failed = PingDf().judge(c, facts)
    assert ok.severity is OK and (ok.data["src"], ok.data["dst"]) == ("spark1", "spark2")
    assert failed.severity is E and failed.node == "spark3" and "probe batch on spark3" in failed.message


def test_path_mtu_hint() -> None:
    assert path_mtu_hint("message too long, mtu=1500") == 1500
    assert path_mtu_hint("Frag needed and DF set (mtu = 1492)") == 1492
    assert path_mtu_hint("100% packet loss") is None and path_mtu_hint(None) is None


def test_tcp_reach_parser() -> None:
    assert parse_tcp_reach(0, "refused\n", "") == TcpReach("refused")
    assert parse_tcp_reach(0, "motd line\nopen\n", "").ok  # a login script may print first
    bad = parse_tcp_reach(0, "unreachable No route to host\n", "")
    assert not bad.ok and bad.detail == "No route to host"
    assert not parse_tcp_reach(0, "unresolved [Errno -2] Name or service not known", "").ok
    with pytest.raises(ProbeError, match="exit 127"):
        parse_tcp_reach(127, "", "sh: python3: not found")
    with pytest.raises(ProbeError):
        parse_tcp_reach(0, "gibberish", "")


def test_tcp_probe_on_this_machine_tells_refused_from_open() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, not listening: the kernel answers with a reset
    try:
        conn = LocalConnector("here")
        got = run_batch(
            conn,
            {
                "open": tcp_probe("127.0.0.1", listener.getsockname()[1]),
                "refused": tcp_probe("127.0.0.1", closed.getsockname()[1]),
            },
        )
    finally:
        listener.close()
        closed.close()
    assert got["open"] == TcpReach("open") and got["refused"] == TcpReach("refused")


def test_router_reach_findings_name_both_ends_and_the_url() -> None:
    head = ReplicaHead(2, "spark3", "10.0.0.3", 30001)
    ok = check_router_reach("spark1", head, TcpReach("refused"))
    assert ok.severity is OK and "path works, nothing listens yet" in ok.message
    bad = check_router_reach("spark1", head, TcpReach("unreachable", "No route to host"))
    assert bad.severity is E and bad.node == "spark1"
    assert (
        bad.message
        == "spark1 -> replica 2 on spark3 (10.0.0.3:30001): not reachable (unreachable: No route to host)"
    )
    assert "http://10.0.0.3:30001" in bad.fix
    unresolved = check_router_reach(
        "spark1", ReplicaHead(1, "spark2", "spark2.local", 8889), TcpReach("unresolved")
    )
    assert "spark2.local does not resolve on spark1" in unresolved.fix


def test_router_reach_judge_reports_a_failed_probe() -> None:
    c = ctx(quad(), "tp2x2")
    facts = {"spark1": NodeFacts("spark1", errors={"router:1": ProbeError("TCP probe failed (exit 127)")})}
    (f,) = RouterReach().judge(c, facts)
    assert f.severity is E and f.check == "RouterReach" and "exit 127" in f.message


# ----------------------------------------------------------------------------- ports and containers of every replica
def test_every_replica_head_and_the_router_get_their_ports_checked() -> None:
    engine = "engine (behind the gateway)"  # the engine's own port, on 127.0.0.1: API port - 10000
    assert planned_ports(build_plan(quad(), "tp4")) == {
        "spark1": {8888: "HTTP", 18888: engine, 50051: "dist-init"}
    }
    assert planned_ports(build_plan(quad(), "tp2x2")) == {
        "spark1": {
            8889: "replica 0 HTTP",
            18889: f"replica 0 {engine}",
            50051: "replica 0 dist-init",
            8888: "router HTTP",
            18888: "router (behind the gateway)",
        },
        "spark3": {8889: "replica 1 HTTP", 18889: f"replica 1 {engine}", 50051: "replica 1 dist-init"},
    }
    c = ctx(quad(), "tp2x2")
    facts = {
        "spark1": NodeFacts("spark1", values={"ports": {18889}, "containers": []}),
        "spark3": NodeFacts("spark3", values={"ports": {8889}, "containers": []}),
    }
    found = PortFree().judge(c, facts)
    busy = sorted(f.message for f in found if f.severity is E)
    assert busy == [
        f"replica 0 {engine} port 18889 already in use on spark1",
        "replica 1 HTTP port 8889 already in use on spark3",
    ]
    assert len([f for f in found if f.severity is OK]) == 6  # the router's own port among them
    assert PortFree().skips_node(c, "spark3") and not PortFree().skips_node(c, "spark2")


def test_the_plans_router_container_is_not_a_stray() -> None:
    prof = quad()
    plan = build_plan(prof, "dp4")
    router = plan.router
    assert router is not None
    mine = ContainerFacts("1", router.container_name, "running", "img", dict(router.labels))
    (f,) = check_stray("spark1", [mine], plan, prof)
    assert f.severity is OK and "is this plan" in f.message
    older = ContainerFacts(
        "2", router.container_name, "running", "img", {**router.labels, "sparkctl.config_hash": "0ld"}
    )
    (f,) = check_stray("spark1", [older], plan, prof)
    assert f.severity is W and "older config" in f.message
    # tp4 runs no router: this cluster's router left running is named, not called unlabelled.
    (f,) = check_stray("spark1", [mine], build_plan(prof, "tp4"), prof)
    assert f.severity is W and "a router mode tp4 does not use" in f.message and "docker rm -f" in f.fix


def test_docker_on_a_router_only_node_needs_no_gpu_runtime() -> None:
    prof = quad({"dp2": {"nodes": ["spark3", "spark4"], "replicas": 2}}, {"node": "spark1"})
    prof = prof.model_copy(
        update={
            "engine": prof.engine.model_copy(
                update={"container": prof.engine.container.model_copy(update={"gpus": True})}
            )
        }
    )
    c = ctx(prof, "dp2")
    assert "hook" not in DockerEngine().probes(c, "spark1") and "hook" in DockerEngine().probes(c, "spark3")
    plain = DockerFacts("27.0", ("runc",), "runc", "/var/lib/docker")
    facts = {n: NodeFacts(n, values={"docker": plain}) for n in ("spark1", "spark3")}
    found = DockerEngine().judge(c, facts)
    assert [f.node for f in found if f.severity is E] == ["spark3"]  # no NVIDIA runtime where ranks run


def test_replicas_sharing_a_node_need_the_sum_of_their_gpus() -> None:
    from sparkctl.facts.gpu import report_from_table
    from sparkctl.preflight.checks.gpus import Gpus

    fixtures = ROOT / "tests" / "fixtures" / "gpu" / "gb10"
    one_gpu = report_from_table(
        (fixtures / "nvidia-smi.txt").read_text(), (fixtures / "meminfo.txt").read_text()
    )
    assert len(one_gpu.gpus) == 1
    prof = quad({"two": {"nodes": ["spark1"], "replicas": 2}}, gpus=2)
    engine = prof.engine.model_copy(
        update={"container": prof.engine.container.model_copy(update={"gpus": True})}
    )
    c = ctx(prof.model_copy(update={"engine": engine}), "two")
    found = Gpus().judge(c, {"spark1": NodeFacts("spark1", values={"gpus": one_gpu})})
    assert any(f.severity is E and "1 GPU(s) visible, the mode needs 2 here" in f.message for f in found)
