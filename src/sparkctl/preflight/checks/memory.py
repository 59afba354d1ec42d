"""UnifiedMemory: on unified-memory nodes (GB10), MemAvailable covers the model and its KV pool."""

from __future__ import annotations

from collections.abc import Mapping

from sparkctl.engines import get_engine
from sparkctl.facts.probe import Probe
from sparkctl.findings import Finding
from sparkctl.preflight.base import ERROR, OK, WARN, Check, Ctx, NodeFacts
from sparkctl.preflight.checks.gpus import gpu_probes
from sparkctl.preflight.checks.weights import (
    du_followup,
    model_size,
    node_commits,
    repo_probes,
    snapshot_sizes,
)
from sparkctl.profile.schema import Profile
from sparkctl.units import human_bytes

GIB = 1 << 30


def unified(profile: Profile, f: NodeFacts) -> bool:
    n = profile.node(f.node)
    report = f.get("gpus")
    return bool(
        (n.gpu is not None and n.gpu.unified_memory) or (report is not None and report.unified_memory)
    )


class UnifiedMemory(Check):
    name = "UnifiedMemory"
    summary = "on unified-memory nodes (GB10), MemAvailable covers what the model needs"
    order = 160

    def probes(self, ctx: Ctx, node: str) -> dict[str, Probe]:
        return {**gpu_probes(), **repo_probes(ctx, node)}

    def followups(self, ctx: Ctx, facts: Mapping[str, NodeFacts]) -> dict[str, dict[str, Probe]]:
        """Size every model on the unified-memory nodes that have it."""
        out: dict[str, dict[str, Probe]] = {}
        for _, ref in ctx.model_refs():
            for n, commit in node_commits(facts, ref.id, ref.revision).items():
                if commit and unified(ctx.profile, facts[n]):
                    out.setdefault(n, {}).update(du_followup(ctx, n, ref.id, commit))
        return out

    def judge(self, ctx: Ctx, facts: Mapping[str, NodeFacts]) -> list[Finding]:
        out = []
        sizes = snapshot_sizes(facts)
        target, draft = ctx.profile.model.target.id, ctx.profile.model.draft
        for node, f in facts.items():
            if not unified(ctx.profile, f) or f.get("meminfo") is None:
                continue
            spec = next(s for s in ctx.plan.ranks if s.node == node)
            weights = None
            tsize = sizes.get((node, target)) or model_size(sizes, target)
            if tsize is not None:
                weights = tsize // ctx.plan.nnodes
                if draft is not None:
                    weights += sizes.get((node, draft.id)) or model_size(sizes, draft.id) or 0
            model = get_engine(ctx.profile.engine.kind).memory
            # Without the flag, the cap the plan would have set on a GB10; without a memory model
            # (no fixed fraction reserved) the weights against all of MemAvailable.
            frac = (model.fraction(spec.argv) or model.gb10_max) if model else 1.0
            flag = model.flag if model else None
            out.append(check_unified_memory(node, f.get("meminfo"), weights, frac, flag=flag))
        return out


def check_unified_memory(
    node: str,
    meminfo: Mapping[str, int],
    weights_bytes: int | None,
    frac: float,
    headroom: int = 4 * GIB,
    *,
    flag: str | None,  # the engine's memory-fraction flag (MemoryModel.flag; None: it has none)
) -> Finding:
    """UnifiedMemory: the engine sizes its pool from MemAvailable P: rest = P*frac - weights
    must leave room for KV; page cache counts as available to the engine but can freeze a GB10."""
    avail = meminfo.get("MemAvailable", 0) * 1024
    free = meminfo.get("MemFree", meminfo.get("MemAvailable", 0)) * 1024
    total = meminfo.get("MemTotal", 0) * 1024
    data = {"mem_available": avail, "mem_free": free, "mem_total": total, "weights": weights_bytes}
    if weights_bytes is None:
        return Finding(
            "UnifiedMemory",
            OK,
            f"MemAvailable {human_bytes(avail)} of {human_bytes(total)} (weights size unknown)",
            node=node,
            data=data,
        )
    need = int(weights_bytes / frac) + headroom
    data["need"] = need
    share = f" / {flag} {frac:g}" if flag else ""
    basis = f"weights {human_bytes(weights_bytes)}{share} + {human_bytes(headroom)} KV"
    if avail < need:
        return Finding(
            "UnifiedMemory",
            ERROR,
            f"MemAvailable {human_bytes(avail)} < {human_bytes(need)} needed ({basis})",
            "stop what holds memory (other containers, `docker ps`), then drop caches: "
            "`sync; echo 3 | sudo tee /proc/sys/vm/drop_caches`",
            node=node,
            data=data,
        )
    if free < need:
        return Finding(
            "UnifiedMemory",
            WARN,
            f"MemFree {human_bytes(free)} < {human_bytes(need)} needed: "
            f"{human_bytes(avail - free)} is page cache",
            "drop caches before `up` (page cache on a GB10 can freeze the box during load): "
            "`sync; echo 3 | sudo tee /proc/sys/vm/drop_caches`",
            node=node,
            data=data,
        )
    return Finding(
        "UnifiedMemory",
        OK,
        f"MemAvailable {human_bytes(avail)} >= {human_bytes(need)} ({basis})",
        node=node,
        data=data,
    )
