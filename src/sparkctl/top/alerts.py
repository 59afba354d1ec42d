"""`top`'s inline warnings: pure functions over one snapshot (and the queue's recent history).

Each rule returns its reason (a short sentence with the numbers that tripped it) or None, so a
test can make each one fire and not fire without any I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparkctl.engines.capabilities import MemoryModel
    from sparkctl.top.metrics import EngineStats
    from sparkctl.top.nodes import GpuStat
    from sparkctl.top.snapshot import NodeView, RankRow, Snapshot

KV_FULL = 0.95  # KV-cache use (MetricNames.token_usage) above this: new requests queue or get retracted
QUEUE_SAMPLES = 3  # the queue must have grown over this many consecutive refreshes
ACCEPT_RATE_FLOOR = 0.15  # DFlash drafts normally accept 3-6 tokens per step (~0.5-0.8 of drafts)
ACCEPT_LENGTH_FLOOR = 1.3  # 1.0 = only the verifier's bonus token: the draft is useless
MEM_AVAILABLE_FLOOR = 0.05  # of MemTotal, on unified memory (GB10): below it the OOM killer is near


@dataclass(frozen=True)
class Knobs:
    """The engine's own flags a hint names (its MemoryModel: request_cap_flag / flag)."""

    request_cap: str = "the engine's request cap"
    mem_fraction: str = "the engine's memory fraction"

    @classmethod
    def of(cls, memory: MemoryModel | None) -> Knobs:
        """The flags of the engine's memory model; the generic words where it has none."""
        if memory is None:
            return cls()
        return cls(memory.request_cap_flag or cls.request_cap, memory.flag)


@dataclass(frozen=True)
class Alert:
    code: str  # RankMissing, NodeDegraded, EngineDown, QueueGrowing, KvCacheFull, ...
    where: str  # "rank 1 (spark2)", "spark1 GPU 0", "engine tp2"
    reason: str

    def to_json(self) -> dict:
        return asdict(self)


def queue_growing(queued: Sequence[float | None], samples: int = QUEUE_SAMPLES) -> str | None:
    """The waiting queue grew at every one of the last `samples` refreshes."""
    recent = list(queued)[-(samples + 1) :]
    if len(recent) < samples + 1 or any(q is None for q in recent):
        return None
    if all(b > a for a, b in zip(recent, recent[1:], strict=False)):  # type: ignore[operator]
        steps = " -> ".join(f"{q:.0f}" for q in recent)  # type: ignore[str-format]
        return f"waiting requests grew {samples} refreshes in a row ({steps}): arrivals outpace the engine"
    return None


def kv_cache_full(stats: EngineStats, limit: float = KV_FULL, knobs: Knobs = Knobs()) -> str | None:
    if stats.token_usage is None or stats.token_usage <= limit:
        return None
    return (
        f"KV cache {stats.token_usage:.0%} full (> {limit:.0%}): requests will queue or be retracted; "
        f"lower {knobs.request_cap} or raise {knobs.mem_fraction}"
    )


def acceptance_collapsed(
    stats: EngineStats, rate_floor: float = ACCEPT_RATE_FLOOR, length_floor: float = ACCEPT_LENGTH_FLOOR
) -> str | None:
    """Speculative decoding accepts (almost) nothing while the engine is generating.

    An engine's acceptance gauges may keep their last value when idle, so an idle engine never warns."""
    busy = (stats.running or 0) > 0 or (stats.gen_tok_s or 0) > 0
    if not busy:
        return None
    if stats.accept_rate is not None and stats.accept_rate < rate_floor:
        return (
            f"draft acceptance rate {stats.accept_rate:.0%} (< {rate_floor:.0%}): the draft model no longer "
            "matches the target (wrong draft, revision or quantisation?)"
        )
    if stats.accept_length is not None and stats.accept_length < length_floor:
        return (
            f"accept length {stats.accept_length:.2f} tokens/step (< {length_floor}): speculative decoding "
            "costs more than it gains"
        )
    return None


def mem_available_low(
    node: NodeView, floor: float = MEM_AVAILABLE_FLOOR, knobs: Knobs = Knobs()
) -> str | None:
    """Unified memory (GB10): what the GPU may still take is the host's MemAvailable."""
    avail, total = node.mem_available_mib, node.mem_total_mib
    if not node.unified_memory or avail is None or not total:
        return None
    if avail >= floor * total:
        return None
    return (
        f"MemAvailable {avail / 1024:.1f} GiB of {total / 1024:.0f} GiB (< {floor:.0%}) on unified memory: "
        f"the engine or the OOM killer is about to fail; lower {knobs.mem_fraction}"
    )


def guard_tripped(node: NodeView, ranks: Sequence[RankRow] = (), recent_s: float = 600.0) -> str | None:
    """The memory guard killed the group on this node lately (both times by the node's clock).

    A trip older than a rank now running on the node is history: the group was started again since.
    """
    trip, now = (node.guard or {}).get("last_trip"), (node.guard or {}).get("now")
    if not trip or now is None or now - trip.get("at", 0) > recent_s:
        return None
    age = now - trip.get("at", 0)
    if any(r.uptime_s is not None and r.uptime_s < age for r in ranks if r.node == node.node):
        return None
    killed = ", ".join(k.get("name", "?") for k in trip.get("killed", [])) or "nothing"
    return f"memory guard killed {killed}: {trip.get('reason')}; `sparkctl status` has the numbers"


def throttling(gpu: GpuStat) -> str | None:
    reasons = gpu.throttles
    if not reasons:
        return None
    clock = ""
    if gpu.sm_clock_mhz is not None and gpu.sm_clock_max_mhz:
        clock = f" (SM {gpu.sm_clock_mhz:.0f}/{gpu.sm_clock_max_mhz:.0f} MHz)"
    temp = f", {gpu.temp_c:.0f} C" if gpu.temp_c is not None else ""
    return f"clocks held back by {', '.join(reasons)}{clock}{temp}: check cooling and power"


def rank_missing(rank: RankRow) -> str | None:
    if rank.state != "missing":
        return None
    return f"{rank.detail}; `sparkctl logs --rank {rank.rank}` says why, `sparkctl up` restarts it"


def evaluate(
    snap: Snapshot, queued_history: Sequence[float | None] = (), knobs: Knobs = Knobs()
) -> list[Alert]:
    """Every rule over one snapshot, in screen order; hints name the engine's `knobs`."""
    out: list[Alert] = []
    for r in snap.ranks:
        if (why := rank_missing(r)) is not None:
            out.append(Alert("RankMissing", f"rank {r.rank} ({r.node})", why))
    for n in snap.nodes:
        if n.error is not None:
            out.append(Alert("NodeDegraded", n.node, f"unreachable: {n.error}"))
            continue
        if (why := mem_available_low(n, knobs=knobs)) is not None:
            out.append(Alert("MemAvailableLow", n.node, why))
        if (why := guard_tripped(n, snap.ranks)) is not None:
            out.append(Alert("MemoryGuardTripped", n.node, why))
        for g in n.gpus:
            if (why := throttling(g)) is not None:
                out.append(Alert("GpuThrottled", f"{n.node} GPU {g.index}", why))
    for e in snap.engines:
        where = f"engine {e.name}"
        if e.error is not None:
            out.append(Alert("EngineMetricsDown", where, e.error))
            continue
        assert e.stats is not None
        for code, why in (
            ("QueueGrowing", queue_growing(queued_history)),
            ("KvCacheFull", kv_cache_full(e.stats, knobs=knobs)),
            ("AcceptanceCollapsed", acceptance_collapsed(e.stats)),
        ):
            if why is not None:
                out.append(Alert(code, where, why))
    return out
