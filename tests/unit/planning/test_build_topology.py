"""Plans of multi-replica and N-node modes: groups, their rendezvous and ports, the router, and the
layouts `profile check` rejects with the rule named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from sparkctl.errors import ProfileError, UsageError
from sparkctl.planning.build import build_plan
from sparkctl.planning.router import ROUTER_KEY_FILE
from sparkctl.profile.load import load_profile_text

ROOT = Path(__file__).resolve().parents[3]


def quad(**over: object) -> dict:
    doc = yaml.safe_load((ROOT / "profiles" / "quad-spark.yaml").read_text())
    for dotted, value in over.items():
        *path, last = dotted.split("__")
        target = doc
        for key in path:
            target = target.setdefault(key, {})
        target[last] = value
    return doc


def load(doc: dict):
    return load_profile_text(yaml.safe_dump(doc), "p.yaml")


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def served(r, name: str) -> str | None:
    """Where a rank's API is served from outside: its gateway's address/port, else its own flag."""
    if r.gateway is None:
        return flag(r.argv, name)
    return r.gateway.listen if name == "--host" else str(r.gateway.port)


@pytest.fixture(autouse=True)
def home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("SPARKCTL_API_KEY", "sk-router-secret-value")


def test_tp4_is_one_group_of_four_node_ranks_without_router() -> None:
    plan = build_plan(load(quad()), "tp4")
    assert plan.replicas == 1 and plan.router is None and plan.nnodes == 4
    assert [(r.node, flag(r.argv, "--node-rank")) for r in plan.ranks] == [
        ("spark1", "0"),
        ("spark2", "1"),
        ("spark3", "2"),
        ("spark4", "3"),
    ]
    assert {flag(r.argv, "--dist-init-addr") for r in plan.ranks} == {"192.168.100.10:50051"}
    assert plan.endpoint.port == 8888 and served(plan.ranks[0], "--port") == "8888"


def test_tp2x2_has_two_groups_each_with_its_own_rendezvous_behind_the_router() -> None:
    plan = build_plan(load(quad()), "tp2x2")
    assert plan.replicas == 2 and plan.nnodes == 2
    assert [[r.node for r in plan.group_ranks(g.index)] for g in plan.groups] == [
        ["spark1", "spark2"],
        ["spark3", "spark4"],
    ]
    assert [g.dist_init_addr for g in plan.groups] == ["192.168.100.10:50051", "192.168.100.12:50051"]
    assert [flag(r.argv, "--nnodes") for r in plan.ranks] == ["2"] * 4
    assert [flag(r.argv, "--node-rank") for r in plan.ranks] == ["0", "1", "0", "1"]
    assert [r.container_name for r in plan.ranks] == [
        "sparkctl-sparkquad-tp2x2-g0-r0",
        "sparkctl-sparkquad-tp2x2-g0-r1",
        "sparkctl-sparkquad-tp2x2-g1-r0",
        "sparkctl-sparkquad-tp2x2-g1-r1",
    ]
    assert [r.labels["sparkctl.group"] for r in plan.ranks] == ["0", "0", "1", "1"]
    # Replicas listen above the router, which keeps engine.port: the user's one endpoint.
    assert {served(r, "--port") for r in plan.ranks} == {"8889"}
    assert plan.router is not None and plan.router.node == "spark1"
    assert plan.endpoint.port == 8888 and plan.router.gateway is not None
    # The router binds 127.0.0.1 below its port; its gateway, on 8888, keeps its keyless routes home.
    gate = plan.router.gateway
    assert (gate.port, gate.upstream_port) == (8888, 18888)
    assert not any(t in ("/engine_metrics", "/get_server_info") for _, t in gate.routes)
    assert (flag(plan.router.argv, "--host"), flag(plan.router.argv, "--port")) == ("127.0.0.1", "18888")
    urls = plan.router.argv[plan.router.argv.index("--worker-urls") + 1 :]
    # spark3 is addressed by name: the router reaches it at the IP that name has on spark3
    assert urls == ["http://127.0.0.1:8889", "http://<IP of spark3.local>:8889"]
    assert plan.addresses_pending and not plan.unresolved  # ranks bind 0.0.0.0: only the URL waits


def test_a_name_addressed_node_binds_and_is_routed_to_by_ip_never_by_name() -> None:
    from sparkctl.planning.model import PlanFacts

    prof = load(quad(engine__host=None))
    facts = PlanFacts(
        addresses={n: (f"10.9.0.{i}", "landed") for i, n in enumerate(["spark2", "spark3", "spark4"], 2)}
    )
    plan = build_plan(prof, "tp2x2", facts)
    hosts = {r.node: served(r, "--host") for r in plan.ranks}
    assert hosts == {"spark1": "127.0.0.1", "spark2": "10.9.0.2", "spark3": "10.9.0.3", "spark4": "10.9.0.4"}
    urls = plan.router.argv[plan.router.argv.index("--worker-urls") + 1 :]
    assert urls == ["http://127.0.0.1:8889", "http://10.9.0.3:8889"]
    assert not plan.unresolved and "spark3: 10.9.0.3 (landed)" in plan.addresses
    unresolved = build_plan(prof, "tp2x2")
    assert not any(
        ".local" in served(r, "--host") and "<" not in served(r, "--host") for r in unresolved.ranks
    )


def test_dp2_is_one_solo_replica_per_box_with_no_multi_node_flags() -> None:
    plan = build_plan(load(quad(modes__dp2={"nodes": ["spark1", "spark2"], "replicas": 2})), "dp2")
    assert plan.replicas == 2 and plan.nnodes == 1
    for r in plan.ranks:
        assert "--nnodes" not in r.argv and "--dist-init-addr" not in r.argv
        assert r.options.rdma_devices_dir is None  # no replica spans nodes: no RDMA devices
        assert "NCCL_SOCKET_IFNAME" not in r.env


def test_replica_per_gpu_on_one_box_pins_gpus_and_ports() -> None:
    doc = yaml.safe_load((ROOT / "profiles" / "two-gpu-box.yaml").read_text())
    plan = build_plan(load(doc), "dp2")
    assert [(r.options.gpus, served(r, "--port")) for r in plan.ranks] == [("0", "30001"), ("1", "30002")]
    # Each replica's engine behind its gateway, on 127.0.0.1 and the API port - 10000.
    assert [(flag(r.argv, "--host"), flag(r.argv, "--port")) for r in plan.ranks] == [
        ("127.0.0.1", "20001"),
        ("127.0.0.1", "20002"),
    ]
    assert plan.router is not None and plan.router.options.gpus is None
    assert plan.endpoint.url == "http://127.0.0.1:30000"


def test_router_key_reaches_it_as_a_file_never_on_argv_or_in_json() -> None:
    plan = build_plan(load(quad()), "dp4")
    router = plan.router
    assert router is not None
    assert "--api-key" not in router.argv[:2] and "sk-router-secret-value" not in " ".join(router.argv)
    assert router.argv[3] == ROUTER_KEY_FILE and router.argv[4] == "sglang_router.launch_router"
    assert [f.target for f in router.secrets] == [ROUTER_KEY_FILE]
    assert "sk-router-secret-value" not in json.dumps(plan.to_json())


def test_router_without_a_key_is_the_plain_launcher() -> None:
    doc = quad()
    del doc["engine"]["api_key"]
    del doc["engine"]["host"]  # each replica binds the address its node is reached at
    plan = build_plan(load(doc), "dp4")
    assert plan.router is not None and plan.router.argv[:3] == [
        "python3",
        "-m",
        "sglang_router.launch_router",
    ]


def test_replica_on_loopback_unreachable_from_the_router_node_is_refused() -> None:
    doc = quad(router__node="spark2")
    doc["engine"]["host"] = None
    with pytest.raises(UsageError, match="replica 0 listens on 127.0.0.1 on node spark1"):
        build_plan(load(doc), "dp4")


def test_other_modes_replica_containers_are_stopped_first() -> None:
    plan = build_plan(load(quad()), "tp4")
    assert "sparkctl-sparkquad-tp2x2-g1-r1" in {c.name for c in plan.stop_first}
    assert "sparkctl-sparkquad-dp4-g3-r0" in {c.name for c in plan.stop_first}


def test_single_replica_plans_keep_their_names_and_hash() -> None:
    plan = build_plan(load(quad()), "tp4")
    assert [r.container_name for r in plan.ranks][:1] == ["sparkctl-sparkquad-tp4-r0"]
    assert plan.shape == "tp=4 on spark1+spark2+spark3+spark4"


@pytest.mark.parametrize(
    ("mode", "rule", "key"),
    [
        (
            {"nodes": ["spark1", "spark2", "spark3", "spark4"], "replicas": 3},
            "replicas-divide-nodes",
            "replicas",
        ),
        ({"nodes": ["spark1", "spark2", "spark3"], "tp": 2}, "nodes-divide-tp-pp", "tp"),
        ({"nodes": ["spark1", "spark2"], "tp": 4}, "gpus-per-node", "tp"),
        ({"nodes": ["spark1", "spark1"], "tp": 2}, "node-once", "nodes"),
        ({"nodes": ["spark1"], "replicas": 2}, "gpus-per-node", "tp"),
    ],
)
def test_bad_layouts_are_rejected_with_the_rule_named(mode: dict, rule: str, key: str) -> None:
    with pytest.raises(ProfileError) as err:
        load(quad(modes__bad=mode))
    assert f"modes.bad.{key}: [{rule}]" in err.value.message


def test_a_port_used_twice_on_one_node_is_rejected() -> None:
    # The router's port (8888) falls inside replica 0's rendezvous range on spark1.
    with pytest.raises(
        ProfileError, match=r"\[ports-distinct\] port 8888 on node 'spark1' is both the router's"
    ):
        load(quad(fabric__dist_init_port=8885))


def test_unknown_router_node_is_rejected() -> None:
    with pytest.raises(ProfileError, match="router.node: unknown node 'spark9'"):
        load(quad(router__node="spark9"))


def test_a_replica_sub_plan_is_that_group_alone_with_its_own_endpoint() -> None:
    plan = build_plan(load(quad()), "tp2x2")
    sub = plan.replica(1)
    assert [r.container_name for r in sub.ranks] == [
        "sparkctl-sparkquad-tp2x2-g1-r0",
        "sparkctl-sparkquad-tp2x2-g1-r1",
    ]
    assert (sub.endpoint.url, sub.dist_init_addr, sub.router) == (
        "http://spark3.local:8889",
        "192.168.100.12:50051",
        None,
    )
    assert sub.rank(3).node == "spark4" and sub.config_hash == plan.config_hash


def test_fabric_test_runs_per_replica_and_refuses_single_gpu_replicas() -> None:
    from sparkctl.gpu.fabric import plans_to_test

    subs = plans_to_test(build_plan(load(quad()), "tp2x2"))
    assert [[r.node for r in s.ranks] for s in subs] == [["spark1", "spark2"], ["spark3", "spark4"]]
    assert [s.dist_init_addr for s in subs] == ["192.168.100.10:50051", "192.168.100.12:50051"]
    with pytest.raises(UsageError, match="single-GPU replicas"):
        plans_to_test(build_plan(load(quad()), "dp4"))


def test_top_reads_each_replicas_own_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    from sparkctl.top import snapshot

    text = (ROOT / "tests" / "fixtures" / "sglang" / "metrics-0.5.23-a.txt").read_text()
    asked: list[str] = []

    def scrape(url: str, timeout: float = 0, key: str | None = None, enable_flag: str | None = None) -> str:
        asked.append(url)
        if "spark3" in url:
            raise snapshot.ScrapeError("/metrics: refused")
        return text

    monkeypatch.setattr(snapshot, "scrape", scrape)
    plan = build_plan(load(quad()), "dp4")
    rows = snapshot.Collector(load(quad()), pool=None)._engines(plan)  # type: ignore[arg-type]
    assert sorted(asked) == [f"{g.endpoint.url}/metrics" for g in plan.groups]
    assert [(r.name, r.error is None) for r in rows] == [
        ("dp4 replica 0", True),
        ("dp4 replica 1", True),
        ("dp4 replica 2", False),
        ("dp4 replica 3", True),
    ]


def test_router_metrics_exporter_is_node_local_on_its_own_port() -> None:
    plan = build_plan(load(quad()), "dp4")
    assert plan.router is not None
    argv = plan.router.argv
    assert (flag(argv, "--prometheus-host"), flag(argv, "--prometheus-port")) == ("127.0.0.1", "29000")
    with pytest.raises(
        ProfileError,
        match=r"\[ports-distinct\] port 8888 on node 'spark1' is both the router's port and the router's metrics port",
    ):
        load(quad(router__metrics_port=8888))


def test_profile_check_cli_names_the_rule(tmp_path: Path) -> None:
    import subprocess
    import sys

    bad = tmp_path / "p.yaml"
    bad.write_text(yaml.safe_dump(quad(modes__bad={"nodes": ["spark1", "spark2", "spark3"], "tp": 2})))
    res = subprocess.run(
        [sys.executable, "-m", "sparkctl", "profile", "check", "-p", str(bad)],
        capture_output=True,
        text=True,
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),
            "COLUMNS": "300",
            "PYTHONPATH": str(ROOT / "src"),
        },
        timeout=120,
    )
    assert res.returncode == 2, res.stderr
    assert "modes.bad.tp: [nodes-divide-tp-pp] group 0 spans 3 node(s)" in res.stderr
