"""The memory plan in words: which term broke the budget, and what each proposed change costs.

`cause` names, in one sentence, the flag and the GiB that took more than what the weights and the
static reserve left; `cost` says what a fix gives up in the user's terms. Counts below zero are
"none left (short by N)", never negative figures. Pure; memory.MemoryPlan and LaunchSettings in.
"""

from __future__ import annotations

from typing import Any

from sparkctl.engines.sglang.launch.inputs import FlagValue, LaunchSettings
from sparkctl.engines.support.launch_check import FP8_KV_COST

GIB = 1 << 30
MIB = 1 << 20
# Draft-token acceptance is modelled as geometric with this per-token rate: with 16 draft tokens
# it gives about 6 accepted tokens per step, the order DFlash reports for its drafts. An
# estimate for the size of the loss, not a measurement of this model.
ACCEPT_RATE = 0.85


def count(n: int) -> str:
    return f"none left (short by {-n})" if n < 0 else f"{n}"


def gib(x: float) -> str:
    return f"none left (short by {-x / GIB:.2f} GiB)" if x < 0 else f"{x / GIB:.2f} GiB"


def _left(plan: Any) -> str:
    return (
        f"the {gib(plan.rest_after_load)} left after the weights "
        f"({(plan.target_weights_per_rank + plan.draft_weights_per_rank) / GIB:.2f} GiB) and the "
        f"--mem-fraction-static {plan.mem_fraction_static:g} reserve ({plan.static_slack / GIB:.2f} GiB)"
    )


def _scratch(plan: Any, s: LaunchSettings, draft_tokens: int) -> str:
    m = plan.mamba
    slots = round(m.intermediate_bytes / max(1, m.per_req_bytes * draft_tokens))
    why = " (SGLang <= 0.5.12 reserves it for every running request)" if plan.ruleset == "0.5.12" else ""
    return (
        f"--speculative-num-draft-tokens {draft_tokens} x {m.per_req_bytes / MIB:.1f} MiB of mamba state "
        f"({m.strategy}) x {slots} request slot(s){why} = {m.intermediate_bytes / GIB:.2f} GiB of "
        f"speculative mamba scratch, against {_left(plan)}"
    )


def cause(plan: Any, s: LaunchSettings, want: int, draft_tokens: int) -> str | None:
    """One sentence: the term that broke the budget (None when the plan serves `want`)."""
    if plan.fits and plan.max_running_requests >= want:
        return None
    w = plan.target_weights_per_rank + plan.draft_weights_per_rank
    if plan.error_check == "WeightsExceedGpu":
        return (
            f"the weights take {w / GIB:.2f} GiB per rank at --tp {plan.tp}, more than the "
            f"{plan.free_before_load / GIB:.2f} GiB free before load"
        )
    m = plan.mamba
    if (
        m is not None
        and m.intermediate_bytes > 0
        and m.intermediate_bytes >= 0.5 * max(plan.rest_after_load, 0)
    ):
        return _scratch(plan, s, draft_tokens)
    if m is not None and (m.slots // max(1, m.ratio)) < want:
        by = f"--max-mamba-cache-size {m.slots}" if s.max_mamba_cache_size is not None else "the mamba cache"
        radix = "without the radix cache" if s.disable_radix_cache else f"with the radix cache, {m.strategy}"
        spec = (
            f", after --speculative-num-draft-tokens {draft_tokens} took {m.intermediate_bytes / GIB:.2f} GiB "
            "of speculative mamba scratch"
            if m.intermediate_bytes > 0
            else ""
        )
        return (
            f"{by} holds {count(m.slots)} slot(s) and each request takes {m.ratio} ({radix}): room for "
            f"{max(0, m.slots // max(1, m.ratio))} of {want} requests, from {_left(plan)}{spec}"
        )
    if plan.rest_after_load <= 0:
        return f"nothing is left for the pools: {_left(plan)}"
    return (
        f"the KV pool gets {gib(plan.kv_budget)} at {plan.kv_cell_bytes} bytes per token "
        f"(--kv-cache-dtype {s.kv_cache_dtype}): {plan.kv_tokens} tokens, from {_left(plan)}"
    )


def accepted_length(draft_tokens: int, rate: float = ACCEPT_RATE) -> float:
    """Expected tokens per verify step with `draft_tokens` drafted (geometric acceptance)."""
    return (1 - rate**draft_tokens) / (1 - rate)


def draft_cost(before: int, after: int) -> str:
    gain_before, gain_after = accepted_length(before) - 1, accepted_length(after) - 1
    lost = 1 - gain_after / gain_before if gain_before > 0 else 0.0
    return (
        f"{before} -> {after} draft tokens: accepted runs of at most {after} tokens per step instead of "
        f"{before} (about {accepted_length(after):.1f} instead of {accepted_length(before):.1f} expected), "
        f"roughly {lost:.0%} of the speculative speed-up lost"
    )


def cost(
    changes: dict[str, FlagValue | None], plan: Any, s: LaunchSettings, want: int, draft_tokens: int
) -> str:
    """What a set of flag changes gives up, in the user's terms (plan: the plan before the change)."""
    out: list[str] = []
    for flag, value in changes.items():
        v = str(value)
        if flag == "speculative-num-draft-tokens":
            out.append(draft_cost(draft_tokens, int(v)))
        elif flag == "kv-cache-dtype" and v.startswith("fp8"):
            out.append(FP8_KV_COST)
        elif flag == "mem-fraction-static":
            slack = plan.free_before_load * (1 - float(v))
            out.append(
                f"{slack / GIB:.2f} GiB instead of {plan.static_slack / GIB:.2f} GiB left for activations and "
                "CUDA graphs (large prefill batches can run out of memory)"
            )
        elif flag == "max-running-requests":
            out.append(f"{v} concurrent requests instead of {want}")
        elif flag == "context-length":
            out.append(f"requests of at most {v} tokens instead of {plan.context_len}")
        elif flag == "tp":
            out.append(f"{v} GPUs per replica instead of {s.tp}")
        elif flag == "disable-radix-cache":
            out.append("no prefix reuse between requests")
    return "; ".join(out) or "nothing the load notices"
