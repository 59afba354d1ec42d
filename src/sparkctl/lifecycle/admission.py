"""Admission on a unified-memory node, pure: does a start fit the memory the node can really give?

The engine pins `fraction x P` for its weights and KV pool: it sizes its pools to fill exactly
that share of the memory P it finds free at start, and on an integrated GPU P is MemAvailable
(psutil's `available`; the engine's memory model, `MemoryModel.serving`, breaks the share down). What the GPU can really allocate,
B, can be less: the CUDA free memory probed in the engine's image (when the node's containers get
a GPU), else MemAvailable itself. On a GB10 the container's shared memory is the same RAM. What
is left must cover the host reserve: `B - ranks x fraction x P - shm >= reserve`. A refusal
carries the numbers and a computed fix (docs/memory.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from sparkctl.engines.support.launch_check import Serving
from sparkctl.units import human_bytes, parse_size  # noqa: F401 - parse_size: memgate imports it from here

GIB = 1 << 30
DROP_CACHES = "sync; echo 3 | sudo tee /proc/sys/vm/drop_caches"
BIG_CACHE = 2 * GIB  # page cache worth dropping before a load


@dataclass(frozen=True)
class NodeMemory:
    node: str
    mem_available: int
    mem_free: int
    mem_total: int
    cached: int
    cuda_free: int | None = None  # probed in the engine's image (cuMemGetInfo)

    @property
    def budget(self) -> int:
        if self.cuda_free is None:
            return self.mem_available
        return min(self.cuda_free, self.mem_available)

    @property
    def source(self) -> str:
        return "CUDA free memory (probed in the image)" if self.cuda_free is not None else "MemAvailable"


@dataclass
class Verdict:
    node: str
    ok: bool
    budget: int
    take: int  # the engine's share (fraction x MemAvailable), all ranks on the node
    seen: int  # MemAvailable: what the engine sizes its share from
    shm: int
    reserve: int
    fraction: float
    ranks: int
    source: str
    fixes: list[str] = field(default_factory=list)

    @property
    def left(self) -> int:
        return self.budget - self.take - self.shm

    def message(self) -> str:
        ranks = f"{self.ranks} ranks x " if self.ranks > 1 else ""
        return (
            f"not enough memory to start: the engine takes {ranks}{self.fraction:g} x MemAvailable "
            f"{human_bytes(self.seen)} = {human_bytes(self.take)}, shm {human_bytes(self.shm)}; of "
            f"{self.source} {human_bytes(self.budget)} that leaves {human_bytes(self.left)} < the host "
            f"reserve {human_bytes(self.reserve)} (memory.reserve_gib)"
        )

    def to_json(self) -> dict:
        keys = (
            "node",
            "ok",
            "budget",
            "take",
            "seen",
            "shm",
            "reserve",
            "fraction",
            "ranks",
            "source",
            "fixes",
        )
        return {k: getattr(self, k) for k in keys} | {"left": self.left}


def max_fraction(budget: int, seen: int, shm: int, reserve: int, ranks: int) -> float:
    """The largest fraction (2 decimals, rounded down) that leaves the reserve."""
    if budget <= 0 or seen <= 0:
        return 0.0
    return min(1.0, max(0.0, math.floor((budget - shm - reserve) / (ranks * seen) * 100) / 100))


def judge(
    mem: NodeMemory,
    *,
    fraction: float,
    ranks: int,
    shm: int,
    reserve: int,
    flag: str,  # the engine's memory-fraction flag (MemoryModel.flag), without dashes
    planner: Callable[[float, int], Serving | None] | None = None,  # (fraction, MemAvailable)
) -> Verdict:
    """Admit or refuse one node; a refusal lists the fixes, best first."""
    budget, seen = mem.budget, mem.mem_available
    take = int(ranks * fraction * seen)
    v = Verdict(mem.node, True, budget, take, seen, shm, reserve, fraction, ranks, mem.source)
    if v.left >= reserve:
        return v
    v.ok = False
    best = max_fraction(budget, seen, shm, reserve, ranks)
    serving = planner(best, seen) if planner is not None and best > 0 else None
    if best <= 0:
        v.fixes.append(
            f"nothing fits: {human_bytes(budget)} does not cover shm {human_bytes(shm)} and the reserve; "
            "stop what holds memory on the node (`docker ps`, other processes)"
        )
    elif serving is None:
        v.fixes.append(f"--{flag} {best:g} (engine.args: {{{flag}: {best:g}}})")
    elif serving.fits:
        v.fixes.append(
            f"--{flag} {best:g}: still serves {serving.requests} requests at once "
            f"({serving.kv_tokens} KV tokens, context {serving.context})"
        )
    if serving is not None and not serving.fits and serving.kv_tokens > 0:
        v.fixes.append(
            f"--{flag} {best:g} with a smaller context: --context-length {serving.kv_tokens} "
            f"(the KV pool at {best:g} holds {serving.kv_tokens} tokens)"
        )
    elif serving is not None and not serving.fits:
        v.fixes.append(f"the weights do not fit at --{flag} {best:g}: a smaller model or more nodes")
    if shm and shm > v.left + shm - reserve:
        v.fixes.append(f"a smaller engine.container.shm_size (now {human_bytes(shm)})")
    if mem.cached >= BIG_CACHE:
        v.fixes.append(
            f"drop the page cache ({human_bytes(mem.cached)} cached; on a GB10 it is not all "
            f"allocatable at load): `{DROP_CACHES}` on {mem.node}"
        )
    return v
