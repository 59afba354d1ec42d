"""RoCE devices from sysfs: one constant script dumps the tree, pure code judges it.

Layout read (under a sysfs root, `/sys` on a real node, a fixture tree in tests):
`class/infiniband/<dev>/ports/<n>/{state,phys_state,rate,link_layer,gids/<i>,gid_attrs/ndevs/<i>}`
and `class/infiniband/<dev>/device/net/<netdev>`. Reading goes through the connector, so the
same code serves local and remote nodes; `read` builtins keep it to one process per node
(a real port has 128+ GID slots).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sparkctl.errors import SparkctlError
from sparkctl.findings import Finding, Severity
from sparkctl.preflight.parsers import ipv4_gid

CHECK = "RoceHca"

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
      printf 'gid\t%s\t%s\t%s\t%s\t%s\n' "$dev" "$port" "$i" "$v" "$nd"
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
                n: {"state": p.state, "phys_state": p.phys_state, "rate": p.rate, "link_layer": p.link_layer,
                    "gids": [{"index": i, "gid": g, "netdev": nd} for i, g, nd in p.gids]}
                for n, p in self.ports.items()
            },
        }  # fmt: skip


class NoRdma(SparkctlError):
    """The sysfs root has no class/infiniband (no RDMA driver loaded)."""

    def __init__(self, sysfs_root: str = "/sys") -> None:
        super().__init__(f"no RDMA devices under {sysfs_root}/class/infiniband",
                         fix="load the ConnectX drivers (DOCA/MLNX OFED, rdma-core), or set fabric.transport: tcp")  # fmt: skip


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
        elif kind == "gid" and len(parts) == 6 and parts[3].isdigit():
            port(parts[1], parts[2]).gids.append((int(parts[3]), parts[4].strip(), parts[5].strip()))
    return devs


# enp1s0f1np1 / enP2p1s0f1np1: PCI domain (absent = 0), bus, slot, function, port.
_NETDEV_RE = re.compile(r"^en(?:P(\d+))?p(\d+)s(\d+)f(\d+)np(\d+)$")


def is_sibling(a: str, b: str) -> bool:
    """Two netdevs of the same CX-7 port seen through its two PCIe halves (DGX Spark: the
    second half lives in another PCI domain). NCCL needs both devices for full bandwidth."""
    ma, mb = _NETDEV_RE.match(a), _NETDEV_RE.match(b)
    return bool(ma and mb and ma.group(1) != mb.group(1) and ma.groups()[1:] == mb.groups()[1:])


def _serves(dev: RdmaDevice, netdevs: list[str], gid: str | None) -> bool:
    bound = dev.bound_netdevs()
    if bound & set(netdevs) or (gid and dev.has_gid(gid)):
        return True
    return any(is_sibling(b, n) for b in bound for n in netdevs)


def hca_candidates(devs: dict[str, RdmaDevice], netdevs: list[str], ip: str | None) -> list[str]:
    """The devices NCCL should use: ACTIVE, and bound to a fabric netdev (or its PCIe sibling) or
    holding the fabric IP's GID."""
    gid = ipv4_gid(ip) if ip else None
    return [
        d.name for d in sorted(devs.values(), key=lambda d: d.name) if d.active and _serves(d, netdevs, gid)
    ]


def check_hcas(
    node: str,
    devs: dict[str, RdmaDevice],
    netdevs: list[str],
    ip: str | None,
    hcas: str | list[str],
    sysfs: str,
) -> list[Finding]:
    """Judge the profile's `fabric.hcas` (a list or 'auto') against the node's sysfs."""
    right = hca_candidates(devs, netdevs, ip)
    where = f"{sysfs.rstrip('/')}/class/infiniband"
    listing = "; ".join(d.summary() for d in sorted(devs.values(), key=lambda d: d.name)) or "none"
    data = {"candidates": right, "devices": {n: d.to_json() for n, d in devs.items()}}
    fabric = ",".join(netdevs)

    def err(msg: str, fix: str) -> Finding:
        return Finding(CHECK, Severity.ERROR, msg, fix, node=node, data=data)

    suggest = (
        f"set nodes[{node}].fabric.hcas: [{', '.join(right)}] (or 'auto')"
        if right
        else f"no ACTIVE RoCE device is bound to {fabric}; devices: {listing}. Check cabling "
        "and the netdev names (e.g. `rdma link show`), or set fabric.transport: tcp"
    )
    if hcas == "auto":
        if not right:
            return [err(f"hcas: auto found no ACTIVE RoCE device for {fabric} in {where}", suggest)]
        return [
            Finding(CHECK, Severity.OK, f"auto -> {','.join(right)}", node=node, data={**data, "hcas": right})
        ]
    findings: list[Finding] = []
    missing = [h for h in hcas if h not in devs]
    if missing:
        findings.append(
            err(
                f"RoCE device(s) {', '.join(missing)} not found in {where} (present: {', '.join(sorted(devs)) or 'none'})",
                suggest,
            )  # fmt: skip
        )
    present = [devs[h] for h in hcas if h in devs]
    for dev in present:
        if not dev.active:
            findings.append(
                err(f"{dev.summary()}: no port is ACTIVE", f"check the cable/link of {dev.name}; " + suggest)
            )
    gid = ipv4_gid(ip) if ip else None
    if gid and present and not any(d.has_gid(gid) for d in present):
        holders = [d.name for d in devs.values() if d.has_gid(gid)]
        findings.append(
            err(
                f"none of {', '.join(d.name for d in present)} has a GID for the fabric IP {ip}"
                + (f" (held by {', '.join(holders)})" if holders else ""),
                suggest if holders or right else f"assign {ip} to {fabric}; " + suggest,
            )
        )
    for dev in present:
        if dev.active and not _serves(dev, netdevs, gid):
            findings.append(
                Finding(
                    CHECK,
                    Severity.WARN,
                    f"{dev.summary()} is not bound to {fabric}",
                    f"NCCL would send fabric traffic over {'/'.join(sorted(dev.bound_netdevs())) or 'another link'}; "
                    f"use {', '.join(right) or 'the devices of the fabric netdev'}",
                    node=node,
                    data=data,
                )
            )
    if not any(f.severity is Severity.ERROR for f in findings):
        findings.insert(0, Finding(CHECK, Severity.OK, f"{','.join(hcas)} ACTIVE on {fabric}", node=node,
                                   data={**data, "hcas": list(hcas)}))  # fmt: skip
    return findings
