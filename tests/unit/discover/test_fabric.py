"""`sparkctl init` picks the fabric: netdevs through preflight's real parser, RoCE from fixture sysfs."""

from __future__ import annotations

import json

import pytest

from sparkctl.connectors.local import LocalConnector
from sparkctl.discover.fabric import NodeNet, fabric_options, pick_fabric
from sparkctl.errors import UsageError
from sparkctl.facts.net import SPEEDS_MARK, parse_netdevs
from sparkctl.facts.rdma import probe_rdma
from tests.fixtures.sysfs.build import build_tree

FABRIC = "enp1s0f1np1"


def netdevs(links: dict[str, tuple[list[str], int, int | None]], down: tuple[str, ...] = ()) -> dict:
    """`ip -j addr show` + speeds text for {netdev: ([cidr...], mtu, speed)}, parsed like on a node."""
    items = [
        {
            "ifname": "lo",
            "mtu": 65536,
            "operstate": "UNKNOWN",
            "flags": ["LOOPBACK", "UP", "LOWER_UP"],
            "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8}],
        }
    ]
    speeds = []
    for name, (cidrs, mtu, speed) in links.items():
        flags = ["BROADCAST", "UP"] + ([] if name in down else ["LOWER_UP"])
        addrs = [
            {"family": "inet", "local": c.split("/")[0], "prefixlen": int(c.split("/")[1])} for c in cidrs
        ]
        items.append(
            {
                "ifname": name,
                "mtu": mtu,
                "operstate": "DOWN" if name in down else "UP",
                "flags": flags,
                "addr_info": addrs,
            }
        )
        speeds.append(f"{name} {speed if speed is not None else ''}")
    return parse_netdevs(json.dumps(items) + f"\n{SPEEDS_MARK}\n" + "\n".join(speeds) + "\n")


@pytest.fixture(scope="module")
def rdma(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """The Spark CX-7 fixture tree with GIDs for this test's fabric IPs, read by the real sysfs probe."""
    out = {}
    for node, ip in (("spark1", "192.168.100.10"), ("spark2", "192.168.100.11")):
        root = build_tree(tmp_path_factory.mktemp(node), {FABRIC: ip})
        out[node] = probe_rdma(LocalConnector(node), str(root))
    return out


def spark(
    name: str, last: int, rdma: dict | None = None, **extra: tuple[list[str], int, int | None]
) -> NodeNet:
    links = {
        "enP7s7": ([f"192.168.1.{last}/24"], 1500, 1000),  # the LAN, SSH goes here
        FABRIC: ([f"192.168.100.{last}/24"], 9000, 200000),
        "docker0": (["172.17.0.1/16"], 1500, None),  # the same on every node
        **extra,
    }
    return NodeNet(name, netdevs(links), rdma or {}, ssh_ip=f"192.168.1.{last}" if last != 10 else None)


def test_two_sparks_pick_the_roce_link_not_the_lan(rdma) -> None:
    nodes = [spark("spark1", 10, rdma["spark1"]), spark("spark2", 11, rdma["spark2"])]
    choice = pick_fabric(nodes)
    assert str(choice.subnet) == "192.168.100.0/24"
    assert choice.roce and not choice.management and choice.mtu == 9000 and choice.speed_mbps == 200000
    end = choice.end("spark2")
    assert (end.netdev, end.ip, end.prefixlen) == (FABRIC, "192.168.100.11", 24)
    # The netdev's own device first, then its second PCIe half (both carry NCCL traffic).
    assert end.hcas == ("rocep1s0f1", "roceP2p1s0f1")
    # docker0 (same address everywhere) and loopback are never options; the LAN is, but ranks last.
    subnets = [str(o.subnet) for o in fabric_options(nodes)]
    assert subnets == ["192.168.100.0/24", "192.168.1.0/24"]
    assert fabric_options(nodes)[1].management


def test_without_rdma_the_fabric_is_tcp_and_mtu_then_speed_decide() -> None:
    extra = {"enp1s0f0np0": (["10.0.0.{}/24"], 1500, 400000)}
    nodes = [
        spark("a", 10, **{k: ([v[0][0].format(1)], *v[1:]) for k, v in extra.items()}),
        spark("b", 11, **{k: ([v[0][0].format(2)], *v[1:]) for k, v in extra.items()}),
    ]
    choice = pick_fabric(nodes)
    assert not choice.roce
    assert str(choice.subnet) == "192.168.100.0/24"  # jumbo frames beat raw speed at MTU 1500
    assert pick_fabric(nodes, "enp1s0f0np0").subnet.compressed == "10.0.0.0/24"  # explicit choice


def test_down_link_is_not_a_candidate() -> None:
    a = NodeNet("a", netdevs({FABRIC: (["10.9.0.1/24"], 9000, None)}), {})
    b = NodeNet("b", netdevs({FABRIC: (["10.9.0.2/24"], 9000, None)}, down=(FABRIC,)), {})
    with pytest.raises(UsageError) as err:
        pick_fabric([a, b])
    assert "b has enp1s0f1np1 10.9.0.2/24 [DOWN]" in err.value.message


def test_peer_in_another_subnet_names_what_is_missing(rdma) -> None:
    one = spark("spark1", 10, rdma["spark1"])
    two = NodeNet(
        "spark2",
        netdevs({"enP7s7": (["192.168.1.11/24"], 1500, 1000), FABRIC: (["192.168.200.11/24"], 9000, 200000)}),
        {},
        "192.168.1.11",
    )
    with pytest.raises(UsageError) as err:
        pick_fabric([one, two])
    msg = err.value.message
    assert "spark2 has no address in 192.168.100.0/24 (spark1's enp1s0f1np1)" in msg
    assert "only the management network 192.168.1.0/24 (carries SSH, no RoCE device) is shared" in msg
    assert "spark2 has enP7s7 192.168.1.11/24 (SSH), enp1s0f1np1 192.168.200.11/24" in msg
    assert "--fabric" in (err.value.fix or "")
    # The user may still choose the management network on purpose.
    assert str(pick_fabric([one, two], "192.168.1.0/24").subnet) == "192.168.1.0/24"
    with pytest.raises(UsageError, match="--fabric 10.1.1.0/24: not a subnet every node"):
        pick_fabric([one, two], "10.1.1.0/24")


def test_same_address_on_both_nodes_is_not_a_fabric() -> None:
    a = NodeNet("a", netdevs({"eth1": (["10.5.0.1/24"], 9000, None)}), {})
    b = NodeNet("b", netdevs({"eth1": (["10.5.0.1/24"], 9000, None)}), {})
    assert fabric_options([a, b]) == []
