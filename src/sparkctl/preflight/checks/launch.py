"""Launch: the engine's launch-safety checks (flags with the image's parser, rules, memory
planner), run from preflight with the GPU reports it probed. The findings keep their own names
(MemoryFit, ...): `--only MemoryFit` runs just that one."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from sparkctl.findings import Finding
from sparkctl.preflight.base import SKIP, Check, Ctx, NodeFacts
from sparkctl.preflight.checks.gpus import gpu_report


def launch_names() -> frozenset[str]:
    """Finding names of every engine's launch checks (profile-independent: names are validated first)."""
    from sparkctl.engines import ENGINE_NAMES, get_engine

    checks = (get_engine(n).launch for n in ENGINE_NAMES)
    return frozenset().union(*(c.check_names() for c in checks if c is not None))


class Launch(Check):
    name = "Launch"
    summary = "the engine's launch-safety rules (flags, GPU arch, memory), when available"
    order = 180
    skip_when_unreachable = False  # judged on the profile and plan, not on the nodes

    @classmethod
    def subnames(cls) -> frozenset[str]:
        return launch_names()

    def selected(self, ctx: Ctx) -> bool:
        return self.name in ctx.selected or bool(ctx.selected & launch_names())

    def judge(self, ctx: Ctx, facts: Mapping[str, NodeFacts]) -> list[Finding]:
        from sparkctl.engines import get_engine

        everything = self.name in ctx.selected
        launch = get_engine(ctx.profile.engine.kind).launch
        if launch is None:
            return [
                Finding(self.name, SKIP, f"engine '{ctx.profile.engine.kind}' has no launch-safety checks")
            ]
        try:
            reports = {n: gpu_report(f) for n, f in facts.items()}  # what Gpus probed (free memory)
            found = launch.check(ctx.plan, ctx.profile, ctx.pool, reports)
        except Exception as exc:  # noqa: BLE001 - another module's failure must not hide ours
            return [Finding(self.name, SKIP, f"launch-safety checks failed to run: {exc}")]
        return [
            dataclasses.replace(f, data={**f.data, "group": self.name})
            for f in found
            if everything or f.check in ctx.selected
        ]
