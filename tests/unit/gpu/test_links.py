"""fabric-test --links: one two-rank plan per cable of the group's layout, each on its own cage."""

from __future__ import annotations

from pathlib import Path

from sparkctl.facts.cabling import build_layout
from sparkctl.gpu.fabric import rendezvous_host
from sparkctl.gpu.links import link_pairs, link_plans
from sparkctl.planning.build import build_plan
from sparkctl.profile import load_profile_file
from tests.fixtures.sysfs import layouts
from tests.unit.facts.test_cabling import gather

TRIO = Path(__file__).parents[3] / "profiles" / "trio-spark.yaml"
NODES = ["spark1", "spark2", "spark3"]


def test_a_ring_gives_one_plan_per_cable_on_that_cable(tmp_path) -> None:
    profile = load_profile_file(TRIO)
    plan = build_plan(profile, "tp3")
    lay = build_layout(NODES, gather(layouts.ring3(), tmp_path))
    found = dict(link_plans(plan, lay))
    assert list(found) == [
        "spark1 port 1 <-> spark2 port 0 (10.0.12.0/24)",
        "spark2 port 1 <-> spark3 port 0 (10.0.23.0/24)",
        "spark1 port 0 <-> spark3 port 1 (10.0.31.0/24)",
    ]
    p = found["spark1 port 0 <-> spark3 port 1 (10.0.31.0/24)"]
    assert [r.node for r in p.ranks] == ["spark1", "spark3"]
    assert rendezvous_host(p) == "10.0.31.1"  # on that cable, not rank 0's fabric IP 10.0.12.1
    assert p.dist_init_addr.endswith(":50051")
    s1, s3 = p.ranks
    assert (
        s1.env["NCCL_IB_HCA"] == "rocep1s0f0,roceP2p1s0f0" and s1.env["NCCL_SOCKET_IFNAME"] == "enp1s0f0np0"
    )
    assert (
        s3.env["NCCL_IB_HCA"] == "rocep1s0f1,roceP2p1s0f1" and s3.env["GLOO_SOCKET_IFNAME"] == "enp1s0f1np1"
    )
    assert plan.ranks[0].env["NCCL_IB_HCA"] != s1.env["NCCL_IB_HCA"]  # the group's plan is untouched


def test_a_switch_tests_every_pair(tmp_path) -> None:
    nodes = ["spark1", "spark2", "spark3", "spark4"]
    lay = build_layout(nodes, gather(layouts.switch4(), tmp_path))
    assert len(link_pairs(lay)) == 6
