"""`up --ship`: run `up`; when its preflight stops on a missing image or weights and the caller
agrees, ship them to the mode's nodes that lack them and run `up` again (one workflow, no CLI)."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from sparkctl.errors import SparkctlError
from sparkctl.lifecycle.modes import resolve_mode
from sparkctl.lifecycle.steps import QuietReporter, Reporter, UpResult
from sparkctl.lifecycle.up import PreflightFailedError, up

if TYPE_CHECKING:
    from sparkctl.connectors.pool import NodePool
    from sparkctl.profile.schema import Profile
    from sparkctl.ship import Progress


def up_or_ship(
    profile: Profile,
    pool: NodePool,
    *,
    offer: Callable[[PreflightFailedError], set[str]],
    progress: Callable[[], AbstractContextManager[Progress]],
    mode: str | None = None,
    tp: int | None = None,
    skip_preflight: bool = False,
    timeout: float | None = None,
    reporter: Reporter | None = None,
    rolling: bool = True,
) -> UpResult:
    """`offer(exc)` says what to ship ({"image", "weights"} or nothing: the error stands);
    `progress()` gives the transfer display. One deadline from the start: shipping spends it,
    the retry gets the rest."""
    start = time.monotonic()
    rep = reporter or QuietReporter()

    def run(timeout_s: float | None) -> UpResult:
        return up(
            profile,
            pool,
            mode=mode,
            tp=tp,
            skip_preflight=skip_preflight,
            timeout=timeout_s,
            reporter=rep,
            rolling=rolling,
        )

    try:
        return run(timeout)
    except PreflightFailedError as exc:
        what = offer(exc)
        if not what:
            raise
    from sparkctl.planning.build import build_plan
    from sparkctl.ship import ship

    plan = build_plan(profile, resolve_mode(profile, mode, tp=tp))
    rep.phase(f"shipping {' and '.join(sorted(what))} to the nodes of {plan.mode} that lack them")
    with progress() as shown:
        ship(profile, plan.nodes, pool, image="image" in what, weights="weights" in what, progress=shown)
    spent = time.monotonic() - start
    left = (timeout if timeout is not None else profile.engine.ready_timeout) - spent
    if left <= 0:
        raise SparkctlError(
            f"the deadline passed while shipping ({spent:.0f}s)",
            fix="rerun `sparkctl up` (shipped files stay), or raise --timeout",
        )
    return run(left)
