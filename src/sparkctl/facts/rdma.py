"""RoCE devices from sysfs: one constant script dumps the tree, pure code reads it.

Layout read (under a sysfs root, `/sys` on a real node, a fixture tree in tests):
`class/infiniband/<dev>/ports/<n>/{state,phys_state,rate,link_layer,gids/<i>,gid_attrs/ndevs/<i>}`
and `class/infiniband/<dev>/device/net/<netdev>`. Reading goes through the connector, so the
same code serves local and remote nodes; `read` builtins keep it to one process per node
(a real port has 128+ GID slots).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from ipaddress import IPv4Address
from typing import TYPE_CHECKING

from sparkctl.errors import SparkctlError
from sparkctl.facts.probe import Probe, checked, sh_argv

if TYPE_CHECKING:
    from sparkctl.connectors.base import Connector

# $1 = sysfs root. Prints tab-separated records; never fails on a missing attribute.
SYSFS_SCRIPT = r"""
ib="$1/class/infiniband"
[ -d "$ib" ] || { echo "noib"; exit 0; }
for d in "$ib"/*; do
  [ -e "$d" ] || continue
  dev=${d##*/}
  printf 'dev\t%s\n' "$dev"
  for n in "$d"/device/net/*; do [ -e "$n" ] && printf 'net\t%s\t%s\n' "$dev" "${n##*/}"; done
  for p in "$d"/ports/*; do
    [ -d "$p" ] || continue
    port=${p##*/}
    for a in state phys_state rate link_layer; do
      v=; [ -r "$p/$a" ] && IFS= read -r v < "$p/$a" 2>/dev/null
      printf 'attr\t%s\t%s\t%s\t%s\n' "$dev" "$port" "$a" "$v"
    done
    for g in "$p"/gids/*; do
      [ -e "$g" ] || continue
      i=${g##*/}; v=; nd=
      IFS= read -r v < "$g" 2>/dev/null
      case "$v" in ''|0000:0000:0000:0000:0000:0000:0000:0000) continue;; esac
      [ -r "$p/gid_attrs/ndevs/$i" ] && IFS= read -r nd < "$p/gid_attrs/ndevs/$i" 2>/dev/null
      ty=; [ -r "$p/gid_attrs/types/$i" ] && IFS= read -r ty < "$p/gid_attrs/types/$i" 2>/dev/null
      printf 'gid\t%s\t%s\t%s\t%s\t%s\t%s\n' "$dev" "$port" "$i" "$v" "$nd" "$ty"
    done
  done
done
"""


@dataclass
class RdmaPort:
    number: str
    state: str = ""  # "4: ACTIVE"
    phys_state: str = ""  # "5: LinkUp"
    rate: str = ""  # "200 Gb/sec (4X HDR)"
    link_layer: str = ""  # "Ethernet" for RoCE
    gids: list[tuple[int, str, str]] = field(default_factory=list)  # (index, gid, netdev)
    gid_types: dict[int, str] = field(default_factory=dict)  # index -> "RoCE v2" | "IB/RoCE v1"

    @property
    def active(self) -> bool:
        return self.state.split(":")[-1].strip().upper() == "ACTIVE"


@dataclass
class RdmaDevice:
    name: str
    netdevs: list[str] = field(default_factory=list)
    ports: dict[str, RdmaPort] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        return any(p.active for p in self.ports.values())

    def bound_netdevs(self) -> set[str]:
        """Netdevs the device carries traffic for: device/net plus every GID's ndev."""
        return set(self.netdevs) | {nd for p in self.ports.values() for _, _, nd in p.gids if nd}

    def has_gid(self, gid: str) -> bool:
        return any(g == gid for p in self.ports.values() for _, g, _ in p.gids)

    def summary(self) -> str:
        states = ",".join(
            f"port {p.number} {p.state.split(':')[-1].strip() or '?'}" for p in self.ports.values()
        )
        nets = ",".join(sorted(self.bound_netdevs())) or "no netdev"
        return f"{self.name} ({nets}; {states or 'no ports'})"

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "netdevs": sorted(self.bound_netdevs()),
            "active": self.active,
            "ports": {
                n: {
                    "state": p.state,
                    "phys_state": p.phys_state,
                    "rate": p.rate,
                    "link_layer": p.link_layer,
                    "gids": [
                        {"index": i, "gid": g, "netdev": nd, "type": p.gid_types.get(i, "")}
                        for i, g, nd in p.gids
                    ],
                }
                for n, p in self.ports.items()
            },
        }


class NoRdma(SparkctlError):
    """The sysfs root has no class/infiniband (no RDMA driver loaded)."""

    def __init__(self, sysfs_root: str = "/sys") -> None:
        super().__init__(
            f"no RDMA devices under {sysfs_root}/class/infiniband",
            fix="load the ConnectX drivers (DOCA/MLNX OFED, rdma-core), or set fabric.transport: tcp",
        )


def parse_sysfs_dump(text: str) -> dict[str, RdmaDevice]:
    if text.strip() == "noib":
        raise NoRdma()
    devs: dict[str, RdmaDevice] = {}

    def port(dev: str, number: str) -> RdmaPort:
        d = devs.setdefault(dev, RdmaDevice(dev))
        return d.ports.setdefault(number, RdmaPort(number))

    for line in text.splitlines():
        parts = line.split("\t")
        kind = parts[0]
        if kind == "dev" and len(parts) == 2:
            devs.setdefault(parts[1], RdmaDevice(parts[1]))
        elif kind == "net" and len(parts) == 3:
            devs.setdefault(parts[1], RdmaDevice(parts[1])).netdevs.append(parts[2])
        elif kind == "attr" and len(parts) == 5 and parts[3] in ("state", "phys_state", "rate", "link_layer"):
            setattr(port(parts[1], parts[2]), parts[3], parts[4].strip())
        elif kind == "gid" and len(parts) in (6, 7) and parts[3].isdigit():
            p = port(parts[1], parts[2])
            p.gids.append((int(parts[3]), parts[4].strip(), parts[5].strip()))
            if len(parts) == 7 and parts[6].strip():
                p.gid_types[int(parts[3])] = parts[6].strip()
    return devs


# enp1s0f1np1 / enP2p1s0f1np1: PCI domain (absent = 0), bus, slot, function, port.
_NETDEV_RE = re.compile(r"^en(?:P(\d+))?p(\d+)s(\d+)f(\d+)np(\d+)$")


def is_sibling(a: str, b: str) -> bool:
    """Two netdevs of the same CX-7 port seen through its two PCIe halves (DGX Spark: the
    second half lives in another PCI domain). NCCL needs both devices for full bandwidth."""
    ma, mb = _NETDEV_RE.match(a), _NETDEV_RE.match(b)
    return bool(ma and mb and ma.group(1) != mb.group(1) and ma.groups()[1:] == mb.groups()[1:])


def serves(dev: RdmaDevice, netdevs: list[str], gid: str | None) -> bool:
    bound = dev.bound_netdevs()
    if bound & set(netdevs) or (gid and dev.has_gid(gid)):
        return True
    return any(is_sibling(b, n) for b in bound for n in netdevs)


def hca_candidates(devs: dict[str, RdmaDevice], netdevs: list[str], ip: str | None) -> list[str]:
    """The devices NCCL should use: ACTIVE, and bound to a fabric netdev (or its PCIe sibling) or
    holding the fabric IP's GID."""
    gid = ipv4_gid(ip) if ip else None
    return [
        d.name for d in sorted(devs.values(), key=lambda d: d.name) if d.active and serves(d, netdevs, gid)
    ]


def ipv4_gid(ip: str) -> str:
    """The RoCE v2 GID of an IPv4 address as sysfs prints it (IPv4-mapped IPv6)."""
    packed = IPv4Address(ip).packed
    return f"0000:0000:0000:0000:0000:ffff:{packed[0]:02x}{packed[1]:02x}:{packed[2]:02x}{packed[3]:02x}"


def roce_v2_gid_index(dev: RdmaDevice, ip: str) -> int | None:
    """The GID index of the RoCE v2 GID of `ip` on the device (NCCL_IB_GID_INDEX), or None.

    Without type information (an old kernel's sysfs) the IPv4 GID's second slot is v2 by the
    kernel's v1-then-v2 order."""
    gid = ipv4_gid(ip)
    for p in dev.ports.values():
        hits = sorted(i for i, g, _ in p.gids if g == gid)
        typed = [i for i in hits if p.gid_types.get(i, "").lower() == "roce v2"]
        if typed:
            return typed[0]
        if hits and not any(i in p.gid_types for i in hits):
            return hits[-1]
    return None


def rdma_probe(sysfs_root: str = "/sys") -> Probe:
    """RoCE devices with ports, GIDs and bound netdevs (parse raises NoRdma without RDMA drivers)."""
    return Probe(tuple(sh_argv(SYSFS_SCRIPT, sysfs_root)), checked("reading RDMA sysfs", parse_sysfs_dump))


def probe_rdma(conn: Connector, sysfs_root: str = "/sys") -> dict[str, RdmaDevice]:
    return rdma_probe(sysfs_root).run(conn)
