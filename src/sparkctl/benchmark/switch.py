"""`bench --compare A B`: run in mode A, switch (the lifecycle's `up`, which stops the other mode
first and waits until ready), run the same suite in mode B."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sparkctl.benchmark.results import BenchResult
    from sparkctl.benchmark.workloads import Workload
    from sparkctl.profile.schema import Profile


def compare_modes(
    profile: Profile,
    modes: tuple[str, str],
    suite: list[Workload],
    *,
    api_key: str | None = None,
    on_switch: Callable[[str], None] = lambda mode: None,
    **bounds: Any,
) -> list[BenchResult]:
    """`bounds`: run_bench's limits (reps, budget, deadline...), the same in both modes."""
    from sparkctl.benchmark.runner import compare, run_bench
    from sparkctl.connectors import NodePool
    from sparkctl.lifecycle.up import up
    from sparkctl.planning.build import build_plan

    with NodePool(profile) as pool:

        def switch(mode: str) -> None:
            on_switch(mode)
            up(profile, pool, mode=mode)

        def run(mode: str) -> BenchResult:
            plan = build_plan(profile, mode)
            ep = plan.endpoint
            return run_bench(
                ep.url,
                ep.served_model_name,
                suite,
                api_key=api_key,
                mode=mode,
                config_hash=plan.settled_hash,
                **bounds,
            )

        return compare(modes, switch, run)
