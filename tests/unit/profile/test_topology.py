"""Replica groups from (nodes, tp, pp, replicas): layouts that work, and the rule each bad one breaks."""

from __future__ import annotations

import pytest

from sparkctl.profile.topology import TopologyError, layout

SPARKS = {f"spark{i}": 1 for i in range(1, 5)}


def test_solo_is_one_group_on_one_gpu() -> None:
    lay = layout(["spark1"], SPARKS, tp=1)
    (g,) = lay.groups
    assert (g.nodes, g.head.gpu_ids, g.port, g.dist_init_port) == (["spark1"], (0,), 30000, 50051)


def test_tp4_spans_four_nodes_with_node_ranks_in_order() -> None:
    (g,) = layout(["spark1", "spark2", "spark3", "spark4"], SPARKS, tp=4).groups
    assert [(s.node, s.node_rank, s.gpu_ids) for s in g.slots] == [
        ("spark1", 0, (0,)),
        ("spark2", 1, (0,)),
        ("spark3", 2, (0,)),
        ("spark4", 3, (0,)),
    ]


def test_dp2_is_one_solo_replica_per_box_without_nnodes() -> None:
    lay = layout(["spark1", "spark2"], SPARKS, tp=1, replicas=2)
    assert [(g.nodes, g.nnodes, g.port) for g in lay.groups] == [
        (["spark1"], 1, 30000),
        (["spark2"], 1, 30000),
    ]


def test_tp2x2_cuts_four_nodes_into_two_groups() -> None:
    lay = layout(["spark1", "spark2", "spark3", "spark4"], SPARKS, tp=2, replicas=2)
    assert [g.nodes for g in lay.groups] == [["spark1", "spark2"], ["spark3", "spark4"]]
    assert [g.head.node for g in lay.groups] == ["spark1", "spark3"]


def test_replica_per_gpu_on_one_box_gets_own_gpus_and_ports() -> None:
    lay = layout(["box"], {"box": 2}, tp=1, replicas=2)
    assert [(g.head.gpu_ids, g.port, g.dist_init_port) for g in lay.groups] == [
        ((0,), 30000, 50051),
        ((1,), 30001, 50061),
    ]
    assert len({s.gpu_ids for s in lay.slots}) == 2  # no GPU used twice


def test_tp2_on_one_box_uses_both_gpus() -> None:
    (g,) = layout(["box"], {"box": 2}, tp=2).groups
    assert g.head.gpu_ids == (0, 1)


@pytest.mark.parametrize(
    ("nodes", "gpus", "kw", "rule"),
    [
        (["spark1", "spark2", "spark3"], SPARKS, {"tp": 2}, "nodes-divide-tp-pp"),
        (["spark1", "spark2", "spark3"], SPARKS, {"tp": 1, "replicas": 2}, "replicas-divide-nodes"),
        (["spark1", "spark2"], SPARKS, {"tp": 1, "replicas": 3}, "replicas-divide-nodes"),
        (["box"], {"box": 2}, {"tp": 2, "replicas": 2}, "gpus-per-node"),
        (["spark1"], SPARKS, {"tp": 2}, "gpus-per-node"),
        (["spark1", "spark1"], SPARKS, {"tp": 2}, "node-once"),
        (["spark1"], SPARKS, {"tp": 1, "replicas": 0}, "replicas-positive"),
        (["spark1"], SPARKS, {"tp": 0}, "sizes-positive"),
    ],
)
def test_bad_layouts_name_their_rule(nodes: list[str], gpus: dict, kw: dict, rule: str) -> None:
    with pytest.raises(TopologyError) as info:
        layout(nodes, gpus, **kw)
    assert info.value.rule == rule
    assert rule in str(info.value)


def test_pp_counts_towards_the_gpus_a_group_needs() -> None:
    (g,) = layout(["spark1", "spark2"], SPARKS, tp=1, pp=2).groups
    assert [s.gpu_ids for s in g.slots] == [(0,), (0,)]
    with pytest.raises(TopologyError, match="nodes-divide-tp-pp"):
        layout(["spark1", "spark2", "spark3"], SPARKS, tp=1, pp=2)


def test_the_engines_port_behind_the_gateway_is_checked_like_the_others() -> None:
    from sparkctl.profile.topology import _check_ports, internal_offset

    # below the API port, out of Linux's ephemeral range 32768-60999; above it for low API ports
    assert internal_offset(30000, None) == -10000 and internal_offset(8888, None) == 10000
    assert all(not 32768 <= p + internal_offset(p, None) <= 60999 for p in (1024, 8000, 30000, 31000, 32767))
    assert internal_offset(30000, 31000) == 1000  # engine.internal_port: replicas shift alike
    lay = layout(["a"], {"a": 2}, tp=1, replicas=2, port=30001)
    _check_ports(lay, ("a", 30000, 29000), front=10000)  # 40000, 40001, 40002: free
    with pytest.raises(TopologyError) as err:
        _check_ports(lay, None, front=1)  # replica 0's engine on replica 1's API port
    assert err.value.rule == "ports-distinct" and "engine port behind the gateway" in err.value.message
    with pytest.raises(TopologyError) as err:
        _check_ports(lay, ("a", 30000, 29000), front=1)  # the router's own on replica 0's API port
    assert "the router's own port behind the gateway and replica 0's API port" in err.value.message
    with pytest.raises(TopologyError) as err:
        _check_ports(lay, ("a", 30000, 29000), front=-1000)  # the router's own on its metrics port
    assert (
        "29000 on node 'a' is both the router's metrics port and the router's own port" in err.value.message
    )
    with pytest.raises(TopologyError):
        _check_ports(lay, ("a", 30000, 29000), front=40000)  # past 65535
