"""The refusal of a fleet that does not fit, with a fix: smaller memory flags (or memory_gib) for
the services on the nodes over budget, applied to a copy of the profile and re-checked there
(the same build, the same sums), as `fit` re-checks its fixes. Pure (docs/fleet.md)."""

from __future__ import annotations

import math

from sparkctl.engines import get_engine
from sparkctl.planning.fleet import (
    FleetError,
    FleetPlan,
    ServicePlan,
    budget_problems,
    build_fleet,
    fraction_step,
)
from sparkctl.profile.schema import Profile

MIN_FRACTION = 0.05  # below it a service serves nothing: the fix is placement, not a budget
TRIES = 12


def _scales(fleet: FleetPlan) -> dict[str, float]:
    """How far each service's budget must shrink: the tightest node (or GPU) over budget it is on."""
    out: dict[str, float] = {s.name: 1.0 for s in fleet.services}
    for n in fleet.over:
        mine = [sh for sh in n.shares if sh.service in out]
        if n.unified or n.gpu_gib is None:
            budgets = sum(sh.flag_gib if sh.declared_gib is None else sh.declared_gib for sh in mine)
            fixed = n.used_gib - budgets  # shm, routers: not scaled
            scale = max(0.0, ((n.capacity_gib or 0) - fixed) / budgets) if budgets else 0.0
        else:
            scale = min(n.gpu_gib / v for v in n.gpu_sums().values() if v > 0)
        for sh in mine:
            out[sh.service] = min(out[sh.service], scale)
    return out


def _scaled(declared: float | dict[str, float], scale: float) -> float | dict[str, float]:
    if isinstance(declared, dict):
        return {k: math.floor(v * scale * 10) / 10 for k, v in declared.items()}
    return math.floor(declared * scale * 10) / 10


def _fraction(profile: Profile, sp: ServicePlan) -> float | None:
    """The fraction rank 0 asks for; None for an engine without a memory model (no flag to lower)."""
    memory = get_engine(profile.models[sp.name].engine.kind).memory
    return (memory.fraction(sp.plan.ranks[0].argv) or memory.gb10_max) if memory else None


def _edit(
    profile: Profile, sp: ServicePlan, fraction: float | None, gib: float | dict[str, float] | None
) -> tuple[Profile, str]:
    """The profile with one service's flag (and memory_gib) changed, and the change in words."""
    svc = profile.models[sp.name]
    memory = get_engine(svc.engine.kind).memory
    words = []
    if fraction is not None and memory is not None:
        flag = memory.flag
        mode = svc.modes[sp.mode]
        if flag in mode.args:
            modes = {**svc.modes, sp.mode: mode.model_copy(update={"args": {**mode.args, flag: fraction}})}
            svc = svc.model_copy(update={"modes": modes})
            words.append(f"models.{sp.name}.modes.{sp.mode}.args.{flag}: {fraction:g}")
        else:
            engine = svc.engine.model_copy(update={"args": {**svc.engine.args, flag: fraction}})
            svc = svc.model_copy(update={"engine": engine})
            words.append(f"models.{sp.name}.engine.args.{flag}: {fraction:g}")
    if gib is not None:
        svc = svc.model_copy(update={"memory_gib": gib})
        words.append(f"models.{sp.name}.memory_gib: {gib if isinstance(gib, dict) else f'{gib:g}'}")
    return profile.model_copy(update={"models": {**profile.models, sp.name: svc}}), ", ".join(words)


def propose(profile: Profile, fleet: FleetPlan) -> tuple[list[str], FleetPlan] | None:
    """Profile edits that make the fleet fit, and the re-checked fleet; None when none does."""
    selection = {s.name: s.mode for s in fleet.services}
    base = _scales(fleet)
    for attempt in range(TRIES):
        edited, words = profile, []
        for sp in fleet.services:
            scale = min(1.0, base[sp.name] * (0.98**attempt if base[sp.name] < 1 else 1))
            declared = profile.models[sp.name].memory_gib
            gib = None if declared is None or scale >= 1 else _scaled(declared, scale)
            keep = [
                sh.declared_gib * (scale if gib is not None else 1) / sh.flag_gib
                for sh in sp.shares
                if sh.declared_gib is not None and sh.flag_gib
            ]
            flag_scale = min([*keep, 1.0]) if declared is not None else scale
            if flag_scale >= 1 and gib is None:
                continue
            asked = _fraction(profile, sp)
            fraction = fraction_step(asked, min(flag_scale, 1.0)) if flag_scale < 1 and asked else None
            if fraction is not None and fraction < MIN_FRACTION:
                return None
            edited, said = _edit(edited, sp, fraction, gib)
            words.append(said)
        fixed = build_fleet(edited, selection)
        if words and not budget_problems(fixed):
            return words, fixed
    return None


def refusal(profile: Profile, fleet: FleetPlan) -> list[FleetError]:
    """One error per broken budget (naming its node and the numbers), each with the fix."""
    problems = budget_problems(fleet)
    if not problems:
        return []
    found = propose(profile, fleet)
    if found is None:
        busy = ", ".join(n.node for n in fleet.over) or "its nodes"
        fix = (
            f"no smaller memory flag leaves each service room on {busy}: run fewer services there "
            "(put one on another node in its modes), or a smaller model (docs/fleet.md)"
        )
    else:
        words, fixed = found
        sums = "; ".join(f"{n.node} {n.used_gib:.1f} of {n.capacity_gib or 0:.1f} GiB" for n in fixed.nodes)
        fix = f"set {'; '.join(words)} (re-checked: {sums}); then `sparkctl plan --check`"
    return [FleetError(message, node=node, fix=fix) for node, message in problems]
