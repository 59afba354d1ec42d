"""Launch: sparkctl.launch's rules and memory planner, run from preflight (not re-implemented here).

Flag parsing with SGLang's own parser is left to `sparkctl plan --check` (it may import SGLang
or start the image); preflight runs the rules and the memory planner only. The launch findings
keep their own names (MemoryFit, ...): `--only MemoryFit` runs just that one."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from sparkctl.findings import Finding
from sparkctl.preflight.base import SKIP, Check, Ctx, NodeFacts


def launch_names() -> frozenset[str]:
    from sparkctl.launch import CHECK_NAMES

    return CHECK_NAMES


class Launch(Check):
    name = "Launch"
    summary = "launch-safety rules of sparkctl.launch (flags, GPU arch, memory), when available"
    order = 180
    skip_when_unreachable = False  # judged on the profile and plan, not on the nodes

    @classmethod
    def subnames(cls) -> frozenset[str]:
        return launch_names()

    def selected(self, ctx: Ctx) -> bool:
        return self.name in ctx.selected or bool(ctx.selected & launch_names())

    def judge(self, ctx: Ctx, facts: Mapping[str, NodeFacts]) -> list[Finding]:
        from sparkctl.launch.check import check_plan

        everything = self.name in ctx.selected
        try:
            found = check_plan(ctx.plan, ctx.profile, parse_flags=False).findings
        except Exception as exc:  # noqa: BLE001 - another module's failure must not hide ours
            return [Finding(self.name, SKIP, f"launch-safety checks failed to run: {exc}")]
        return [
            dataclasses.replace(f, data={**f.data, "group": self.name})
            for f in found
            if everything or f.check in ctx.selected
        ]
