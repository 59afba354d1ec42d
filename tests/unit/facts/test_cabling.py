"""Fabric layout from each node's facts: the real probe scripts' parsers (and the real sysfs script
run by sh) on GB10-shaped fixtures of a 2-node direct cable, a 3-node ring (also with one crossed
cable), a 4-node switchless ring and a 4-node switch."""

from __future__ import annotations

import pytest

from sparkctl.connectors.local import LocalConnector
from sparkctl.facts.cabling import (
    NEIGH_MARK,
    build_layout,
    cable_faults,
    cage_of,
    layout_env,
    node_cages,
    parse_neighbours,
)
from sparkctl.facts.net import parse_netdevs
from sparkctl.facts.probe import ParseError
from sparkctl.facts.rdma import probe_rdma
from tests.fixtures.sysfs import layouts


def gather(sc: layouts.Scenario, tmp_path) -> dict:
    """{node: {cage: Cage}} as preflight would build them from each node's probe outputs."""
    dirs = layouts.write(sc, tmp_path)
    out = {}
    for node, d in dirs.items():
        netdevs = parse_netdevs((d / "ip-addr.txt").read_text())
        rdma = probe_rdma(LocalConnector(node), str(d / "sys"))
        out[node] = node_cages(node, netdevs, rdma, parse_neighbours((d / "neigh.txt").read_text()))
    return out


def test_both_pcie_halves_are_one_cage() -> None:
    assert cage_of("enp1s0f1np1") == cage_of("enP2p1s0f1np1") == "port 1"
    assert cage_of("enp1s0f0np0") == "port 0" and cage_of("enP7s7") is None


def test_two_nodes_direct(tmp_path) -> None:
    cages = gather(layouts.direct2(), tmp_path)
    lay = build_layout(["spark1", "spark2"], cages)
    assert lay.kind == "direct" and len(lay.links) == 1
    assert lay.links[0].describe() == "spark1 port 1 <-> spark2 port 1 (192.168.100.0/24)"
    assert lay.hcas("spark1") == ["rocep1s0f1", "roceP2p1s0f1"]  # both halves of the cage
    assert lay.gid_index("spark1") == 3
    assert layout_env(lay, "spark2") == {"NCCL_IB_HCA": "rocep1s0f1,roceP2p1s0f1", "NCCL_IB_GID_INDEX": "3"}
    assert cable_faults(lay, cages) == []


def test_three_node_ring_uses_both_cages_and_ring_algo(tmp_path) -> None:
    cages = gather(layouts.ring3(), tmp_path)
    lay = build_layout(["spark1", "spark2", "spark3"], cages)
    assert lay.kind == "ring" and len(lay.links) == 3 and lay.missing == []
    env = layout_env(lay, "spark1")
    assert env["NCCL_IB_HCA"] == "rocep1s0f0,roceP2p1s0f0,rocep1s0f1,roceP2p1s0f1"
    assert env["NCCL_ALGO"] == "Ring"
    assert cable_faults(lay, cages) == []


def test_three_node_ring_with_a_crossed_cable_names_node_and_port(tmp_path) -> None:
    cages = gather(layouts.ring3(crossed=True), tmp_path)
    lay = build_layout(["spark1", "spark2", "spark3"], cages)
    assert lay.kind == "ring"  # the addressing is a ring; only the neighbours show the crossing
    faults = cable_faults(lay, cages)
    seen = {(f.cage.node, f.cage.name, f.want.node, f.want.name, f.got.node, f.got.name) for f in faults}
    assert ("spark1", "port 1", "spark2", "port 0", "spark3", "port 1") in seen
    assert ("spark2", "port 0", "spark1", "port 1", "spark1", "port 0") in seen
    assert all(f.kind == "crossed" for f in faults)
    assert not any(f.cage.node == "spark2" and f.cage.name == "port 1" for f in faults)  # that cable is right


def test_four_node_switchless_ring(tmp_path) -> None:
    nodes = ["spark1", "spark2", "spark3", "spark4"]
    cages = gather(layouts.ring4(), tmp_path)
    lay = build_layout(nodes, cages)
    assert lay.kind == "ring" and len(lay.links) == 4 and lay.missing == []
    assert all(layout_env(lay, n)["NCCL_ALGO"] == "Ring" for n in nodes)
    assert cable_faults(lay, cages) == []


def test_four_node_ring_with_a_link_down_is_partial_with_the_missing_link(tmp_path) -> None:
    sc = layouts.ring4()
    sc.cables = sc.cables[:3]  # spark4 port 1 -> spark1 port 0 unplugged
    cages = gather(sc, tmp_path)
    lay = build_layout(sc.nodes, cages)
    faults = cable_faults(lay, cages)
    assert {(f.kind, f.cage.node, f.cage.name) for f in faults} == {
        ("missing", "spark4", "port 1"),
        ("missing", "spark1", "port 0"),
    }


def test_switch(tmp_path) -> None:
    nodes = ["spark1", "spark2", "spark3", "spark4"]
    cages = gather(layouts.switch4(), tmp_path)
    lay = build_layout(nodes, cages)
    assert lay.kind == "switch" and list(lay.switch) == ["10.0.0.0/24"]
    env = layout_env(lay, "spark3")
    assert "NCCL_ALGO" not in env and env["NCCL_IB_HCA"] == "rocep1s0f1,roceP2p1s0f1"


def test_gid_index_five_on_one_kit(tmp_path) -> None:
    cages = gather(layouts.ring4(v6_first={"spark3"}), tmp_path)
    lay = build_layout(["spark1", "spark2", "spark3", "spark4"], cages)
    assert [lay.gid_index(n) for n in lay.nodes] == [3, 3, 5, 3]
    assert layout_env(lay, "spark3")["NCCL_IB_GID_INDEX"] == "5"


def test_neighbour_parser() -> None:
    text = f'noise\n{NEIGH_MARK}\n[{{"dst": "fe80::1", "dev": "enp1s0f1np1", "lladdr": "AA:bb:cc:dd:ee:ff"}}, {{"dst": "10.0.0.9", "dev": "enp1s0f1np1", "state": ["FAILED"]}}]'
    assert parse_neighbours(text) == {"enp1s0f1np1": ["aa:bb:cc:dd:ee:ff"]}
    with pytest.raises(ParseError):
        parse_neighbours("[]")
