"""Memory fixes with a margin: every proposal is re-run through the same planner and rules.

A fix must (1) pass every launch rule, (2) fit under SGLang's accounting with `headroom_mib`
less free memory than measured, and (3) leave room for the requested --max-running-requests
(or `min_requests` when none is set). When no fix serves that load, trade-offs are offered
instead, each planned the same way: fewer running requests, a shorter context, more GPUs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from sparkctl.engines.sglang.launch.inputs import FlagValue, GpuFacts, LaunchSettings, with_flags
from sparkctl.engines.sglang.launch.memory import MemoryInputs, MemoryPlan, default_mem_fraction, plan_memory
from sparkctl.engines.sglang.launch.memory import max_mem_fraction as _cap
from sparkctl.engines.sglang.launch.memory_terms import MIB, free_before_load
from sparkctl.engines.support.launch_check import Margin

MIN_DRAFT_TOKENS = 2  # one draft token drafts nothing: never propose fewer than 2


@dataclass
class MemoryFix:
    changes: dict[str, FlagValue | None]
    plan: MemoryPlan
    why: str
    tradeoff: bool = False  # serves less than asked (fewer requests, shorter context, other GPUs)

    @property
    def flags(self) -> str:
        return " ".join(
            f"--{k} {v}" if v is not True else f"--{k}" for k, v in self.changes.items() if v is not None
        )


def with_headroom(gpu: GpuFacts, headroom_mib: int) -> GpuFacts:
    """The GPU as seen with `headroom_mib` less free memory before load."""
    free, _ = free_before_load(gpu)
    return replace(gpu, available_mib=int(free // MIB) - headroom_mib)


def serves(plan: MemoryPlan | None, want: int) -> bool:
    return plan is not None and plan.fits and plan.max_running_requests >= want


Planner = Callable[[list[str]], MemoryPlan | None]  # argv -> plan under the margin (None: rule error)


def memory_fixes(argv: list[str], inp: MemoryInputs, margin: Margin, plan_ok: Planner) -> list[MemoryFix]:
    """Single-flag fixes that serve the load: the smallest mem fraction, the largest draft token
    count (>= 2), an FP8 KV cache; else one combination; else trade-offs."""
    s, gpu = inp.settings, inp.gpu
    want = margin.required(s.max_running_requests)
    out: list[MemoryFix] = []

    def try_(changes: dict[str, FlagValue | None]) -> MemoryPlan | None:
        plan = plan_ok(with_flags(argv, changes))
        return plan if serves(plan, want) else None

    start = s.mem_fraction_static or default_mem_fraction(s, gpu, inp.target.is_mla, inp.target)
    m = round(start + 0.01, 2)
    while m <= _cap(gpu) + 1e-9:
        ch: dict[str, FlagValue | None] = {"mem-fraction-static": f"{m:.2f}"}
        if plan := try_(ch):
            out.append(MemoryFix(ch, plan, f"smallest mem fraction serving {want} requests"))
            break
        m = round(m + 0.01, 2)
    if s.has_spec:
        d0 = s.draft_tokens(inp.draft.dflash_block_size if inp.draft else None)
        for d in range(d0 - 1, MIN_DRAFT_TOKENS - 1, -1):
            ch = {"speculative-num-draft-tokens": str(d)}
            if s.dflash_block_size is not None:
                ch["speculative-dflash-block-size"] = str(d)
            if plan := try_(ch):
                out.append(MemoryFix(ch, plan, f"largest draft token count serving {want} requests"))
                break
    if s.kv_cache_dtype in ("auto", "bf16", "bfloat16") and not inp.target.kv_cache_quant_fp8:
        ch = {"kv-cache-dtype": "fp8_e4m3"}
        if plan := try_(ch):
            out.append(MemoryFix(ch, plan, "FP8 KV cache halves KV bytes"))
    if not out:
        out += _combined(s, gpu, try_, want)
    return out


def _combined(s: LaunchSettings, gpu: GpuFacts, try_: Callable, want: int) -> list[MemoryFix]:
    changes: dict[str, FlagValue | None] = {"mem-fraction-static": f"{_cap(gpu):.2f}"}
    if s.kv_cache_dtype in ("auto", "bf16", "bfloat16"):
        changes["kv-cache-dtype"] = "fp8_e4m3"
    steps: list[dict[str, FlagValue | None]] = [{}]
    if s.has_spec:
        steps += [{"speculative-num-draft-tokens": str(d)} for d in (8, 4, MIN_DRAFT_TOKENS)]
    for step in steps:
        changes = {**changes, **step}
        if plan := try_(changes):
            return [
                MemoryFix(
                    dict(changes), plan, f"no single change serves {want} requests; this combination does"
                )
            ]
    return []


def tradeoffs(
    argv: list[str], inp: MemoryInputs, margin: Margin, plan_ok: Planner, nnodes: int, gpus: int | None = None
) -> list[MemoryFix]:
    """What can be served instead when no fix serves the requested load."""
    want = margin.required(inp.settings.max_running_requests)
    out: list[MemoryFix] = []
    lo, hi, best = 1, want - 1, None
    while lo <= hi:  # fitting is monotone in max running requests
        mid = (lo + hi) // 2
        plan = plan_ok(with_flags(argv, {"max-running-requests": str(mid)}))
        if serves(plan, mid):
            best, lo = (mid, plan), mid + 1
        else:
            hi = mid - 1
    if best:
        out.append(
            MemoryFix(
                {"max-running-requests": str(best[0])},
                best[1],
                f"fewer running requests: {best[0]} instead of {want}",
                tradeoff=True,
            )
        )
        if best[1].kv_tokens < best[1].context_len:
            ctx_len = max(1024, best[1].kv_tokens // 1024 * 1024)
            ch: dict[str, FlagValue | None] = {
                "max-running-requests": str(best[0]),
                "context-length": str(ctx_len),
            }
            plan = plan_ok(with_flags(argv, ch))
            if plan is not None and plan.fits:
                out.append(
                    MemoryFix(
                        ch, plan, f"shorter context: {ctx_len} tokens fit one full request", tradeoff=True
                    )
                )
    out += _more_gpus(argv, inp, margin, want, nnodes, gpus)
    return out


def _more_gpus(
    argv: list[str], inp: MemoryInputs, margin: Margin, want: int, nnodes: int, gpus: int | None
) -> list[MemoryFix]:
    """The smallest larger tp the boxes hold (`gpus`: what the group's nodes have; None: unknown)
    and the heads allow that serves the load, else the largest tried."""
    from sparkctl.engines.sglang.launch.rules import check_heads

    best: MemoryFix | None = None
    for tp in (inp.settings.tp * k for k in (2, 4, 8)):
        if (gpus is not None and tp > gpus) or tp % max(1, nnodes):
            continue
        settings = LaunchSettings.from_argv(with_flags(argv, {"tp": str(tp)}))
        if check_heads(settings, inp.target):
            continue
        more = plan_memory(replace(inp, settings=settings, gpu=with_headroom(inp.gpu, margin.headroom_mib)))
        if not more.fits:
            continue
        served = "serves" if serves(more, want) else "still serves only"
        best = MemoryFix(
            {"tp": str(tp)},
            more,
            f"more GPUs: tp={tp} ({-(-tp // nnodes)} per node over {nnodes} "
            f"node(s)) {served} {more.max_running_requests} requests",
            tradeoff=True,
        )
        if serves(more, want):
            break
    return [best] if best else []
