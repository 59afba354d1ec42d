"""Per-node numbers for `top`: GPU (nvidia-smi), MemAvailable, fabric netdev byte counters.

All of a node's probes run in ONE exec over the node's verified connection (preflight's
`run_batch`); nothing is installed on the node. Parsers are pure and tested on fixtures;
a probe that fails (no nvidia-smi in the testbed, a netdev gone) degrades its cell, not the row.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from sparkctl.facts.gpu import MEMINFO_ARGV, ProbeParseError, is_unified, parse_meminfo, parse_query_gpu

if TYPE_CHECKING:
    from sparkctl.connectors.base import Connector, RunResult

# The fields (and order) of the captured tests/fixtures/gpu/h200/top-query-*.csv; driver 580 also
# accepts the old name clocks_throttle_reasons.active (help-query-gpu.txt).
TOP_FIELDS: tuple[str, ...] = (
    "index",
    "name",
    "uuid",
    "utilization.gpu",
    "utilization.memory",
    "memory.used",
    "memory.total",
    "temperature.gpu",
    "power.draw",
    "power.limit",
    "clocks.sm",
    "clocks.mem",
    "clocks.max.sm",
    "clocks_event_reasons.active",
)
GPU_ARGV: list[str] = ["nvidia-smi", f"--query-gpu={','.join(TOP_FIELDS)}", "--format=csv,noheader,nounits"]
PROBE_TIMEOUT = 10.0

# nvmlClocksEventReasons bits (nvml.h) that mean the GPU is held back, with what to say.
THROTTLE_BITS: dict[int, str] = {
    0x4: "SW power cap",
    0x8: "HW slowdown",
    0x20: "SW thermal slowdown",
    0x40: "HW thermal slowdown",
    0x80: "HW power brake",
}


@dataclass(frozen=True)
class GpuStat:
    index: int
    name: str
    util_pct: float | None = None
    mem_used_mib: int | None = None
    mem_total_mib: int | None = None  # None on unified-memory parts (GB10)
    temp_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    throttle_mask: int | None = None

    @property
    def throttles(self) -> list[str]:
        """Active reasons that slow the GPU down (idle and app-clock settings are not throttling)."""
        mask = self.throttle_mask or 0
        return [why for bit, why in THROTTLE_BITS.items() if mask & bit]

    def to_json(self) -> dict:
        return {**asdict(self), "throttles": self.throttles}


def _float(text: str) -> float | None:
    try:
        return float(text.strip())
    except ValueError:  # [N/A], [Not Supported], ...
        return None


def parse_gpu_stats(text: str) -> list[GpuStat]:
    """`GPU_ARGV`'s output (index/name/memory through facts.gpu's parser, the rest here)."""
    gpus = parse_query_gpu(text, TOP_FIELDS)
    rows = [
        dict(zip(TOP_FIELDS, (c.strip() for c in line.split(",")), strict=True))
        for line in text.splitlines()
        if line.strip()
    ]
    out = []
    for gpu, row in zip(gpus, rows, strict=True):
        mask = row["clocks_event_reasons.active"]
        try:
            mask_value = int(mask, 16) if mask.lower().startswith("0x") else None
        except ValueError:
            mask_value = None
        out.append(
            GpuStat(
                index=gpu.index,
                name=gpu.name,
                util_pct=_float(row["utilization.gpu"]),
                mem_used_mib=gpu.memory_used_mib,
                mem_total_mib=None if is_unified(gpu) else gpu.memory_total_mib,
                temp_c=_float(row["temperature.gpu"]),
                power_w=_float(row["power.draw"]),
                power_limit_w=_float(row["power.limit"]),
                sm_clock_mhz=_float(row["clocks.sm"]),
                sm_clock_max_mhz=_float(row["clocks.max.sm"]),
                throttle_mask=mask_value,
            )
        )
    return out


def net_argv(netdevs: list[str]) -> list[str]:
    """`cat` of rx_bytes and tx_bytes for each netdev, in order (names come from the profile)."""
    argv = ["cat"]
    for dev in netdevs:
        argv += [f"/sys/class/net/{dev}/statistics/rx_bytes", f"/sys/class/net/{dev}/statistics/tx_bytes"]
    return argv


def parse_net(text: str, netdevs: list[str]) -> dict[str, tuple[int, int]]:
    """net_argv's output -> {netdev: (rx_bytes, tx_bytes)}."""
    values = text.split()
    if len(values) != 2 * len(netdevs) or not all(v.isdigit() for v in values):
        raise ProbeParseError(f"netdev counters: expected {2 * len(netdevs)} numbers, got {text[:80]!r}")
    return {dev: (int(values[2 * i]), int(values[2 * i + 1])) for i, dev in enumerate(netdevs)}


@dataclass
class NodeSample:
    """One probe round on one node. `error`: the node itself could not be asked (degraded row)."""

    node: str
    t: float
    error: str | None = None
    gpus: list[GpuStat] = field(default_factory=list)
    gpu_error: str | None = None
    meminfo: dict[str, int] = field(default_factory=dict)  # kB
    mem_error: str | None = None
    net: dict[str, tuple[int, int]] = field(default_factory=dict)
    net_error: str | None = None
    guard: dict | None = None  # the memory guard: {running, state, last_trip} (None: never ran here)

    @property
    def unified_memory(self) -> bool:
        return any(g.mem_total_mib is None for g in self.gpus)

    @property
    def mem_available_mib(self) -> int | None:
        kb = self.meminfo.get("MemAvailable")
        return kb // 1024 if kb is not None else None

    @property
    def mem_total_mib(self) -> int | None:
        kb = self.meminfo.get("MemTotal")
        return kb // 1024 if kb is not None else None


def net_rates(now: NodeSample, before: NodeSample | None) -> dict[str, dict[str, float | None]]:
    """{netdev: {"rx_bytes_s", "tx_bytes_s"}} from two samples (None without an earlier one)."""
    out: dict[str, dict[str, float | None]] = {}
    for dev, (rx, tx) in now.net.items():
        prev = before.net.get(dev) if before is not None else None
        dt = now.t - before.t if before is not None else 0.0
        if prev is None or dt <= 0 or rx < prev[0] or tx < prev[1]:
            out[dev] = {"rx_bytes_s": None, "tx_bytes_s": None}
        else:
            out[dev] = {"rx_bytes_s": (rx - prev[0]) / dt, "tx_bytes_s": (tx - prev[1]) / dt}
    return out


def _why(res: RunResult, what: str) -> str:
    if res.rc == 127:
        return f"{what} not found on the node"
    lines = (res.stderr or res.stdout).strip().splitlines()
    return f"{what} failed (exit {res.rc}): {lines[-1] if lines else 'no output'}"


# The memory guard's files on the node (docs/memory.md): liveness (its flock), last sample, last trip.
GUARD_SH = r"""f="$HOME/.local/state/sparkctl/guard/$1"
[ -f "$f.json" ] || exit 0
if flock -n -s "$f.lock" true 2>/dev/null; then echo "false $(date +%s)"; else echo "true $(date +%s)"; fi
cat "$f.json"; echo
tail -n 1 "$f.trips.jsonl" 2>/dev/null; echo
"""


def parse_guard(text: str) -> dict | None:
    """The guard probe's output: {"running", "now" (the node's clock), "state", "last_trip"}; None
    when no guard ran there."""
    import json

    lines = text.splitlines()
    if not lines:
        return None
    head = lines[0].split()
    docs = [json.loads(x) if x.strip().startswith("{") else None for x in [*lines[1:3], "", ""][:2]]
    now = float(head[1]) if len(head) > 1 and head[1].isdigit() else None
    return {"running": head[:1] == ["true"], "now": now, "state": docs[0], "last_trip": docs[1]}


def node_probes(netdevs: list[str], cluster: str | None = None) -> dict[str, Any]:
    """The Probe objects of one round (raw results: each cell is judged by `read_node`)."""
    from sparkctl.facts.probe import Probe

    raw = lambda r: r  # noqa: E731 - parse later, per cell, so one failure degrades only its cell
    probes = {
        "gpu": Probe(tuple(GPU_ARGV), raw, PROBE_TIMEOUT),
        "mem": Probe(tuple(MEMINFO_ARGV), raw, PROBE_TIMEOUT),
    }
    if netdevs:
        probes["net"] = Probe(tuple(net_argv(netdevs)), raw, PROBE_TIMEOUT)
    if cluster:
        probes["guard"] = Probe(("sh", "-c", GUARD_SH, "sparkctl-guard", cluster), raw, PROBE_TIMEOUT)
    return probes


def read_node(conn: Connector, netdevs: list[str], t: float, cluster: str | None = None) -> NodeSample:
    """All probes of one node in one exec; per-cell errors are kept, not raised."""
    from sparkctl.facts.probe import run_batch

    got = run_batch(conn, node_probes(netdevs, cluster))
    sample = NodeSample(conn.node, t)
    sample.gpus, sample.gpu_error = _cell(got["gpu"], "nvidia-smi", parse_gpu_stats, [])
    sample.meminfo, sample.mem_error = _cell(got["mem"], "/proc/meminfo", parse_meminfo, {})
    if "net" in got:
        sample.net, sample.net_error = _cell(
            got["net"], "netdev counters", lambda s: parse_net(s, netdevs), {}
        )
    if "guard" in got:
        sample.guard, _ = _cell(got["guard"], "memory guard", parse_guard, None)
    return sample


def _cell(res: Any, what: str, parse: Any, empty: Any) -> tuple[Any, str | None]:
    if isinstance(res, Exception):
        return empty, f"{what}: {res}"
    if res.rc != 0:
        return empty, _why(res, what)
    try:
        return parse(res.stdout), None
    except (ProbeParseError, ValueError) as exc:
        return empty, f"{what}: {exc}"
