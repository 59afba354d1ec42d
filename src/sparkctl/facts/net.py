"""Network facts: netdevs (MTU, state, IPv4, sysfs speed), pings, listening ports, SSH to a peer."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from sparkctl.facts.probe import ParseError, Probe, ProbeError, checked, sh_argv


# ----------------------------------------------------------------------------- netdevs
@dataclass(frozen=True)
class Netdev:
    name: str
    mtu: int
    operstate: str  # "UP", "DOWN", "UNKNOWN" (veth/loopback report UNKNOWN or UP)
    flags: tuple[str, ...] = ()
    ipv4: tuple[str, ...] = ()  # "10.0.0.1/24"
    speed_mbps: int | None = None  # from sysfs; informational (a CX-7 may lie: measure instead)
    mac: str = ""  # link-layer address (`ip -j addr`'s "address")

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
            mac=str(link.get("address", "")).lower(),
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


NETDEV_SCRIPT = f"""ip -j addr show || exit $?
echo '{SPEEDS_MARK}'
for d in /sys/class/net/*; do s=; IFS= read -r s < "$d/speed" 2>/dev/null; echo "${{d##*/}} $s"; done
"""
PROC_NET_TCP_ARGV = ["cat", "/proc/net/tcp", "/proc/net/tcp6"]


def netdevs_probe() -> Probe:
    """Every netdev with MTU, state, IPv4 addresses and (sysfs) speed."""
    return Probe(
        tuple(sh_argv(NETDEV_SCRIPT)),
        checked("ip -j addr show", parse_netdevs, "install iproute2 (>= 4.14)"),
    )


def ping_probe(ip: str, *, size: int | None = None, iface: str | None = None, count: int = 2) -> Probe:
    """Ping from the node; with `size`, a don't-fragment ping of exactly that payload."""
    argv = ["ping", "-n", "-c", str(count), "-i", "0.2", "-W", "1"]  # 0.2 s: the unprivileged minimum
    if size is not None:
        argv += ["-M", "do", "-s", str(size)]
    if iface:
        argv += ["-I", iface]
    return Probe((*argv, ip), lambda r: parse_ping(r.rc, r.stdout, r.stderr), timeout=count * 0.2 + 5)


def ssh_probe(host: str, *, port: int = 22, user: str | None = None, timeout: int = 5) -> Probe:
    """`ssh host true` run ON the node, non-interactively, strict about host keys (returns RunResult)."""
    target = f"{user}@{host}" if user else host
    argv = (
        "ssh",
        "-o",
        "BatchMode=yes",
        "-o",
        f"ConnectTimeout={timeout}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-p",
        str(port),
        "--",  # the target is never read as an option
        target,
        "true",
    )
    return Probe(argv, lambda r: r, timeout=timeout + 5)


def ports_probe() -> Probe:
    return Probe(tuple(PROC_NET_TCP_ARGV), checked("reading /proc/net/tcp", parse_listening_ports))


def path_mtu_hint(error: str | None) -> int | None:
    """The MTU a failed DF ping names (iputils: `local error: message too long, mtu=1500`,
    `Frag needed and DF set (mtu = 1500)`), or None."""
    m = re.search(r"mtu\s*=\s*(\d+)", error or "", re.IGNORECASE)
    return int(m.group(1)) if m else None


# ----------------------------------------------------------------------------- TCP path
@dataclass(frozen=True)
class TcpReach:
    """A TCP connect from a node: `open` (something listens), `refused` (the host answered with a
    reset: the path works, nothing listens yet), or why the path does not work."""

    state: str  # open | refused | timeout | unreachable | unresolved | error
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.state in ("open", "refused")


# Runs on the node with host, port, timeout as argv (never interpolated); prints `<state> <detail>`.
TCP_SOURCE = """\
import errno, socket, sys
host, port, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
try:
    socket.create_connection((host, port), timeout).close()
    print("open")
except socket.gaierror as exc:
    print("unresolved", exc)
except ConnectionRefusedError:
    print("refused")
except socket.timeout:
    print("timeout", "no answer within %gs" % timeout)
except OSError as exc:
    bad = (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN)
    print("unreachable" if exc.errno in bad else "error", exc.strerror or exc)
"""
_TCP_STATES = ("open", "refused", "timeout", "unreachable", "unresolved", "error")


def parse_tcp_reach(rc: int, stdout: str, stderr: str) -> TcpReach:
    """The last line TCP_SOURCE printed (a login script may print first)."""
    lines = stdout.strip().splitlines()
    state, _, detail = (lines[-1] if lines else "").partition(" ")
    if rc != 0 or state not in _TCP_STATES:
        why = (stderr.strip() or stdout.strip() or f"exit {rc}").splitlines()[-1]
        raise ProbeError(
            f"TCP probe failed (exit {rc}): {why}", "the node needs python3 (the probe batch does too)"
        )
    return TcpReach(state, detail.strip())


def tcp_probe(host: str, port: int, *, timeout: float = 3.0) -> Probe:
    """A TCP connect from the node to host:port (tests the path; the port need not be open)."""
    argv = ("python3", "-c", TCP_SOURCE, host, str(port), f"{timeout:g}")
    return Probe(argv, lambda r: parse_tcp_reach(r.rc, r.stdout, r.stderr), timeout=timeout + 5)
