"""FabricLayout, Cabling and RoceGidIndex judged on GB10-shaped facts of each layout (2-node direct,
3-node ring with one crossed cable, 4-node switchless ring, switch), read by the real parsers."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sparkctl.connectors.local import LocalConnector
from sparkctl.facts.cabling import parse_neighbours
from sparkctl.facts.net import parse_netdevs
from sparkctl.facts.rdma import probe_rdma
from sparkctl.findings import Severity
from sparkctl.planning.build import build_plan
from sparkctl.preflight.base import Ctx, NodeFacts
from sparkctl.preflight.checks.cables import Cabling
from sparkctl.preflight.checks.fabric_layout import FabricLayout
from sparkctl.preflight.checks.gid_index import RoceGidIndex
from sparkctl.preflight.registry import REGISTRY
from sparkctl.profile import load_profile_text
from tests.fixtures.sysfs import layouts

ROOT = Path(__file__).parents[4]
E, W, OK = Severity.ERROR, Severity.WARN, Severity.OK


def profile_for(sc: layouts.Scenario, *, layout: str = "auto", ips: dict | None = None, **node_fabric):
    doc = yaml.safe_load((ROOT / "profiles" / "quad-spark.yaml").read_text())
    doc["fabric"]["layout"] = layout
    doc["nodes"] = [n for n in doc["nodes"] if n["name"] in sc.nodes]
    for n in doc["nodes"]:
        netdevs, _, gid_ips = layouts.node_texts(sc, n["name"])
        n["fabric"] = {
            "netdevs": sorted(gid_ips),
            "ip": (ips or {}).get(n["name"]) or sorted(gid_ips.values())[0],
        }
        n["fabric"] |= {"hcas": "auto", **node_fabric}
    doc["modes"] = {"all": {"nodes": sc.nodes, "tp": len(sc.nodes)}}
    doc.pop("router", None)
    return load_profile_text(yaml.safe_dump(doc))


def facts_for(sc: layouts.Scenario, root: Path) -> dict[str, NodeFacts]:
    out = {}
    for node, d in layouts.write(sc, root).items():
        values = {
            "netdevs": parse_netdevs((d / "ip-addr.txt").read_text()),
            "rdma": probe_rdma(LocalConnector(node), str(d / "sys")),
            "neighbours": parse_neighbours((d / "neigh.txt").read_text()),
        }
        out[node] = NodeFacts(node, values=values)
    return out


def judge(check, profile, facts) -> list:
    ctx = Ctx(profile, build_plan(profile, "all"), frozenset({check.name}), "/sys", REGISTRY)
    assert check.applies(ctx)
    return check.judge(ctx, facts)


def bad(found) -> list:
    return [f for f in found if f.severity in (E, W)]


def test_direct_two_nodes_pass_every_layout_check(tmp_path) -> None:
    sc = layouts.direct2()
    profile, facts = profile_for(sc), facts_for(sc, tmp_path)
    for check in (FabricLayout(), Cabling(), RoceGidIndex()):
        found = judge(check, profile, facts)
        assert found and not bad(found), [f.message for f in found]
    (ok,) = judge(FabricLayout(), profile, facts)
    assert ok.message == "direct: spark1 port 1 <-> spark2 port 1 (192.168.100.0/24)"
    assert ok.data["env"]["spark1"] == {"NCCL_IB_HCA": "rocep1s0f1,roceP2p1s0f1", "NCCL_IB_GID_INDEX": "3"}


def test_one_pcie_half_in_nccl_ib_hca_warns(tmp_path) -> None:
    sc = layouts.direct2()
    profile = profile_for(sc, hcas=["rocep1s0f1"])
    (w, w2) = bad(judge(FabricLayout(), profile, facts_for(sc, tmp_path)))
    assert w.severity is W and "roceP2p1s0f1" in w.message and "two PCIe x4" in w.message
    assert "rocep1s0f1, roceP2p1s0f1" in w.fix and {w.node, w2.node} == {"spark1", "spark2"}


def test_three_node_ring_with_a_crossed_cable(tmp_path) -> None:
    sc = layouts.ring3(crossed=True)
    profile = profile_for(
        sc, layout="ring", ips={"spark1": "10.0.12.1", "spark2": "10.0.12.2", "spark3": "10.0.23.3"}
    )
    facts = facts_for(sc, tmp_path)
    errors = bad(judge(Cabling(), profile, facts))
    assert all(f.severity is E for f in errors) and len(errors) == 4
    msgs = "\n".join(f.message for f in errors)
    assert (
        "crossed cable: spark1 port 1 (enp1s0f1np1+enP2p1s0f1np1) carries 10.0.12.0/24 for spark2 port 0 but is cabled to spark3 port 1"
        in msgs
    )
    assert "spark2 port 0" in msgs and "spark1 port 0" in msgs
    assert "spark2 port 1" not in msgs.replace("for spark2 port 1", "")  # spark2-spark3 is cabled right


def test_three_node_ring_rendezvous_off_the_ring_is_named(tmp_path) -> None:
    sc = layouts.ring3()
    profile = profile_for(
        sc, layout="ring", ips={"spark1": "10.0.12.1", "spark2": "10.0.12.2", "spark3": "10.0.23.3"}
    )
    found = bad(judge(FabricLayout(), profile, facts_for(sc, tmp_path)))
    (err,) = [f for f in found if f.severity is E]
    assert err.node == "spark3" and "10.0.12.1" in err.message and "rendezvous" in err.message


def test_four_node_switchless_ring_needs_ring_algo(tmp_path) -> None:
    sc = layouts.ring4()
    facts = facts_for(sc, tmp_path)
    auto = judge(
        FabricLayout(),
        profile_for(sc, ips={n: f"10.0.{i}{i % 4 + 1}.{i}" for i, n in enumerate(sc.nodes, 1)}),
        facts,
    )
    assert auto[0].severity is OK and auto[0].message.startswith("ring: ")
    warn = next(f for f in auto if f.severity is W and "NCCL_ALGO" in f.message)
    assert "fabric.layout: ring" in warn.fix
    assert all(env["NCCL_ALGO"] == "Ring" for env in auto[0].data["env"].values())
    assert not [f for f in bad(judge(Cabling(), profile_for(sc), facts))]


def test_declared_ring_on_a_switch_is_an_error(tmp_path) -> None:
    sc = layouts.switch4()
    found = judge(FabricLayout(), profile_for(sc, layout="ring"), facts_for(sc, tmp_path))
    assert found[0].message.startswith("switch: 10.0.0.0/24 shared by 4 nodes")
    (err,) = bad(found)
    assert "fabric.layout is ring" in err.message and "set fabric.layout: switch" in err.fix


def test_gid_index_five_on_one_kit_breaks_a_cluster_wide_three(tmp_path) -> None:
    sc = layouts.ring4(v6_first={"spark3"})
    facts = facts_for(sc, tmp_path)
    fixed = profile_for(sc, gid_index=3)
    found = judge(RoceGidIndex(), fixed, facts)
    (err,) = [f for f in found if f.severity is E]
    assert err.node == "spark3" and "NCCL_IB_GID_INDEX=3" in err.message and ": 5" in err.message
    per_node = judge(RoceGidIndex(), profile_for(sc), facts)  # unset: each node's own, drift warned
    assert [f.severity for f in per_node].count(E) == 0
    assert any(f.severity is W and "spark3: 5" in f.message for f in per_node)


@pytest.mark.parametrize("layout,n", [("ring", 3), ("ring", 2), ("auto", 3)])
def test_plan_renders_ring_algo_and_gid_index(layout, n) -> None:
    sc = layouts.ring3() if n == 3 else layouts.direct2()
    profile = profile_for(sc, layout=layout, gid_index=3)
    env = build_plan(profile, "all").ranks[0].env
    assert env["NCCL_IB_GID_INDEX"] == "3"
    assert (env.get("NCCL_ALGO") == "Ring") is (layout == "ring" and n == 3)
