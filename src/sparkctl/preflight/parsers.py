"""Pure parsers of what the node probes print. No I/O: tested on captured and fixture text."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from ipaddress import IPv4Address


class ParseError(ValueError):
    """The text is not what the probe's command prints."""


# ----------------------------------------------------------------------------- netdevs
@dataclass(frozen=True)
class Netdev:
    name: str
    mtu: int
    operstate: str  # "UP", "DOWN", "UNKNOWN" (veth/loopback report UNKNOWN or UP)
    flags: tuple[str, ...] = ()
    ipv4: tuple[str, ...] = ()  # "10.0.0.1/24"
    speed_mbps: int | None = None  # from sysfs; informational (a CX-7 may lie: measure instead)

    @property
    def up(self) -> bool:
        """Administratively up with carrier (operstate UNKNOWN is normal for some virtual links)."""
        return "UP" in self.flags and "LOWER_UP" in self.flags and self.operstate != "DOWN"

    @property
    def ips(self) -> tuple[str, ...]:
        return tuple(a.split("/", 1)[0] for a in self.ipv4)

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "mtu": self.mtu,
            "operstate": self.operstate,
            "up": self.up,
            "ipv4": list(self.ipv4),
            "speed_mbps": self.speed_mbps,
        }


SPEEDS_MARK = "#sparkctl-speeds"


def parse_netdevs(text: str) -> dict[str, Netdev]:
    """Output of NETDEV_SCRIPT: `ip -j addr show` JSON, then `<netdev> <speed>` lines."""
    ip_json, _, speeds_text = text.partition(SPEEDS_MARK)
    try:
        links = json.loads(ip_json)
    except json.JSONDecodeError as exc:
        raise ParseError(f"`ip -j addr show` printed no JSON: {ip_json[:120]!r}") from exc
    speeds: dict[str, int] = {}
    for line in speeds_text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit() and int(parts[1]) > 0:
            speeds[parts[0]] = int(parts[1])
    out: dict[str, Netdev] = {}
    for link in links:
        name = link.get("ifname")
        if not name:
            continue
        addrs = tuple(
            f"{a['local']}/{a.get('prefixlen', 32)}"
            for a in link.get("addr_info", [])
            if a.get("family") == "inet"
        )
        out[name] = Netdev(
            name=name,
            mtu=int(link.get("mtu", 0)),
            operstate=str(link.get("operstate", "UNKNOWN")),
            flags=tuple(link.get("flags", [])),
            ipv4=addrs,
            speed_mbps=speeds.get(name),
        )
    return out


# ----------------------------------------------------------------------------- ping
@dataclass(frozen=True)
class PingResult:
    rc: int
    sent: int
    received: int
    error: str | None  # the line that says why, e.g. "local error: message too long, mtu=1500"

    @property
    def ok(self) -> bool:
        return self.received > 0


_PING_STATS = re.compile(r"(\d+) packets transmitted, (\d+) (?:packets )?received")
_PING_ERRORS = re.compile(
    r"(message too long[^\n]*|frag needed[^\n]*|no buffer space available|network is unreachable|"
    r"no route to host|destination host unreachable|cannot assign requested address|"
    r"unknown host|name or service not known|operation not permitted|invalid argument[^\n]*|"
    r"cannot flood[^\n]*|command not found)",
    re.IGNORECASE,
)


def parse_ping(rc: int, stdout: str, stderr: str) -> PingResult:
    """iputils and busybox ping: the statistics line, plus the first error that explains a loss."""
    m = _PING_STATS.search(stdout)
    sent, received = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    err = _PING_ERRORS.search(stderr + "\n" + stdout)
    error = err.group(1).strip() if err else None
    if error is None and not received:
        last = (stderr.strip() or stdout.strip()).splitlines()
        error = last[-1] if rc and last and not m else ("100% packet loss" if m else "no reply")
    return PingResult(rc=rc, sent=sent, received=received, error=error)


# ----------------------------------------------------------------------------- listening ports
def parse_listening_ports(text: str) -> set[int]:
    """TCP ports in LISTEN state from /proc/net/tcp and /proc/net/tcp6 (concatenated)."""
    ports: set[int] = set()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 4 or parts[0] == "sl" or not parts[0].endswith(":"):
            continue
        local, state = parts[1], parts[3]
        if state == "0A" and ":" in local:
            ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports


# ----------------------------------------------------------------------------- disk
@dataclass(frozen=True)
class DiskUsage:
    path: str  # the path asked about
    mount: str
    total_kib: int
    avail_kib: int


def parse_df(text: str, path: str) -> DiskUsage:
    """`df -Pk <path>` (POSIX format: one line per filesystem, no wrapping)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) < 2:
        raise ParseError(f"df printed no filesystem line: {text[:120]!r}")
    parts = lines[-1].split()
    if len(parts) < 6 or not parts[1].isdigit() or not parts[3].isdigit():
        raise ParseError(f"unexpected df line: {lines[-1]!r}")
    return DiskUsage(path=path, mount=" ".join(parts[5:]), total_kib=int(parts[1]), avail_kib=int(parts[3]))


# ----------------------------------------------------------------------------- HF snapshots
_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_SHORT_HEX = re.compile(r"^[0-9a-f]{7,39}$")


@dataclass(frozen=True)
class RepoListing:
    """What is in `<hf_cache>/hub/models--org--name` on one node."""

    exists: bool
    refs: dict[str, str] = field(default_factory=dict)  # "main" -> commit
    snapshots: dict[str, int] = field(default_factory=dict)  # commit -> number of entries


def parse_repo_listing(text: str) -> RepoListing:
    """Output of SNAPSHOT_SCRIPT: `norepo`, or `ref\\t<name>\\t<commit>` / `snap\\t<commit>\\t<n>` lines.

    Content (sha256 per file) is compared separately, with ship's manifest (checks.check_weights_content)."""
    if text.strip() == "norepo":
        return RepoListing(exists=False)
    refs: dict[str, str] = {}
    snaps: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if parts[0] == "ref" and len(parts) == 3:
            refs[parts[1]] = parts[2].strip()
        elif parts[0] == "snap" and len(parts) == 3 and parts[2].isdigit():
            snaps[parts[1]] = int(parts[2])
    return RepoListing(exists=True, refs=refs, snapshots=snaps)


def resolve_revision(listing: RepoListing, revision: str | None) -> str | None:
    """The snapshot commit a revision names: a full hash, a ref (branch/tag/pr), or a short hash."""
    rev = revision or "main"
    if _HEX40.match(rev):
        return rev if rev in listing.snapshots else None
    commit = listing.refs.get(rev)
    if commit:
        return commit if commit in listing.snapshots else None
    if _SHORT_HEX.match(rev):
        hits = [c for c in listing.snapshots if c.startswith(rev)]
        return hits[0] if len(hits) == 1 else None
    return None


def ipv4_gid(ip: str) -> str:
    """The RoCE v2 GID of an IPv4 address as sysfs prints it (IPv4-mapped IPv6)."""
    packed = IPv4Address(ip).packed
    return f"0000:0000:0000:0000:0000:ffff:{packed[0]:02x}{packed[1]:02x}:{packed[2]:02x}{packed[3]:02x}"
