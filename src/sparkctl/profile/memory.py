"""The profile's `memory:` section: the unified-memory guard, admission and settling (docs/memory.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from sparkctl.profile.base import Strict

if TYPE_CHECKING:
    from sparkctl.profile.schema import Profile

# Kernel lines that mean the GPU driver ran out of memory or the GPU faulted (regular expressions,
# matched at the START of each kernel record's message on /dev/kmsg: the guard never searches a
# line's middle, where a process's name or a file name can put any text; memguard.py).
KERNEL_PATTERNS = [
    r"^NVRM: .*NV_ERR_NO_MEMORY",
    r"^NVRM: .*[Oo]ut of memory",
    r"^NVRM: Xid \(PCI:[0-9a-fA-F]",
]


class Guard(Strict):
    """The watchdog each guarded node runs for this cluster while its ranks load and serve."""

    enabled: Literal["auto"] | bool = Field(
        "auto",
        description="auto: on the unified-memory nodes (nodes[].gpu.unified_memory); `up --guard` forces it.",
    )
    min_available_gib: float = Field(
        6.0, ge=0, description="Trip when MemAvailable falls below this (GiB; GB10: ~5% of 119.7 GiB)."
    )
    psi_full_pct: float = Field(
        30.0, gt=0, le=100, description="Trip when every task stalled on memory this share of psi_window_s."
    )
    psi_window_s: float = Field(3.0, gt=0, le=60, description="The window of the PSI share (seconds).")
    interval_s: float = Field(1.0, gt=0, le=10, description="Seconds between samples.")
    fast_interval_s: float = Field(
        0.1,
        gt=0,
        le=10,
        description="Seconds between samples near the floor (under 2x, or falling towards it).",
    )
    horizon_s: float = Field(
        5.0,
        ge=0,
        le=60,
        description="Sample fast when MemAvailable's fall would cross the floor within this.",
    )
    kernel_patterns: list[str] = Field(
        default_factory=lambda: list(KERNEL_PATTERNS),
        description="Regular expressions matched at the start of a kernel record's message (facility 0, not a line led by a task name); one matching with MemAvailable under twice the floor trips the guard.",
    )
    idle_exit_s: float = Field(
        120.0, gt=0, description="The guard exits once no container of the cluster ran on its node this long."
    )


class Memory(Strict):
    """How sparkctl keeps a unified-memory node (GB10) from running out: admission, settle, guard."""

    unified: Literal["auto"] | bool = Field(
        "auto",
        description="Which nodes share CPU and GPU memory: auto = nodes[].gpu.unified_memory; "
        "true = every node (admission, settle and the guard apply to them).",
    )
    guard: Guard = Field(default_factory=Guard, description="The node-side watchdog.")
    admission: bool = Field(
        True, description="Refuse a start whose memory budget does not fit (every start)."
    )
    reserve_gib: float = Field(
        4.0, ge=0, description="Memory a start must leave to the host after the engine's share (GiB)."
    )
    settle_margin_gib: float = Field(
        2.0,
        ge=0,
        description="Before a restart, wait until MemAvailable is within this of before the last start.",
    )
    settle_timeout: float = Field(
        120.0,
        ge=0,
        description="Seconds a start waits for memory to settle after a stop (then admission decides).",
    )
    gated_start: bool = Field(
        False,
        description="Start each multi-node group gated where its engine release has a launch gate "
        "(SGLang >= 0.5.23: --gated-launch-port on fabric.dist_init_port + 7): every rank rendezvouses, "
        "admission runs on every node of the group at that moment, then `up` opens the gate; a refusal "
        "stops every rank before any allocated GPU memory (docs/memory.md).",
    )


def unified_nodes(profile: Profile, nodes: list[str]) -> list[str]:
    """The nodes whose GPU shares the host's memory: `memory.unified` true (all), false (none),
    auto (by the profile's nodes[].gpu.unified_memory)."""
    unique, unified = list(dict.fromkeys(nodes)), profile.memory.unified
    if isinstance(unified, bool):
        return unique if unified else []
    return [n for n in unique if (gpu := profile.node(n).gpu) is not None and gpu.unified_memory]


# What a DGX Spark's node looks like in a profile written without `gpu:` (its ConnectX-7 netdevs,
# its RoCE HCAs, its name): enough to warn, never to switch the memory safety on by itself.
_SPARK_HINTS = ("spark", "gb10", "enp1s0f", "enP2p1s0f", "rocep1s0f", "roceP2p1s0f")


def gb10_without_gpu(profile: Profile, nodes: list[str]) -> list[str]:
    """The nodes that look like a GB10 but say no `gpu:`: they get no memory-fraction cap and, with
    memory.unified auto, no admission, settle or guard (docs/memory.md)."""
    if profile.memory.unified is not False and profile.memory.unified is not True:
        out = []
        for name in dict.fromkeys(nodes):
            node = profile.node(name)
            words = [node.name, node.address]
            if node.fabric is not None:
                words += [
                    *node.fabric.netdevs,
                    *(node.fabric.hcas if isinstance(node.fabric.hcas, list) else []),
                ]
            if node.gpu is None and any(h.lower() in w.lower() for w in words for h in _SPARK_HINTS):
                out.append(name)
        return out
    return []
