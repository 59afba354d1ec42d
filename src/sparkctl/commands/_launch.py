"""The launch check `fit` and `plan --check` run: launch/'s pipeline for the engine it models, the
engine's own `check` for the others (its flags through its parser in the image, its rules and memory
model), so that no engine's flags are judged by another engine's parser."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def run_launch_check(plan, prof, pipeline: Callable[[], Any], *, reach: bool = True):  # -> LaunchCheck
    """`pipeline()` when launch/ models the profile's engine, else the engine's check: over SSH when
    rank 0's node answers (its image's parser), else offline (the rules and memory model alone)."""
    from sparkctl.engines import get_engine

    engine = get_engine(prof.engine.kind)
    if engine.launch_planner:
        return pipeline()
    from sparkctl.errors import ConnectError
    from sparkctl.launch.check import LaunchCheck

    findings = None
    if reach:
        from sparkctl.connectors import NodePool

        try:
            with NodePool(prof) as pool:
                findings = engine.check(plan, prof, pool, {})
        except ConnectError:
            findings = None  # unreachable: judged offline below, as launch/'s pipeline does
    if findings is None:
        findings = engine.check(plan, prof, None, {})
    return LaunchCheck(findings=findings, memory=None, memory_fixes=[], fix={})
