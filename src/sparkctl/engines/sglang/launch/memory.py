"""Predict how SGLang sizes its memory pools, and the error it would die with, before launch.

Pure functions over explicit inputs; every step names the SGLang function it mirrors. Two rule
sets exist because the formulas changed between releases:

* "0.5.23": srt/mem_cache/kv_cache_configurator.py, srt/model_executor/pool_configurator.py,
  srt/configs/mamba_utils.py, srt/mem_cache/draft_kv_budget.py + kv_cache_dtype.py,
  srt/arg_groups/memory_hook.py (default mem_fraction_static, launch/mem_fraction.py).
* "0.5.12" (used for 0.5.12 and older; read in the 0.5.9 and 0.5.12 wheels):
  srt/model_executor/model_runner_kv_cache_mixin.py (_profile_available_bytes,
  handle_max_mamba_cache, _calculate_mamba_ratio) and pool_configurator.py (DFLASH draft KV by
  layer-count scaling). The speculative mamba scratch is per_req * max_running_requests * draft
  tokens, which is what killed the two-RTX-3090 launch ("Not enough memory").
  0.5.13-0.5.22 are not modelled separately (0.5.16 is between the two); they get 0.5.23's.
Memory quantities are bytes (SGLang works in GiB floats). docs/launch-safety.md cites the lines.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from sparkctl.engines.sglang.launch.explain import count
from sparkctl.engines.sglang.launch.inputs import GpuFacts, LaunchSettings
from sparkctl.engines.sglang.launch.mem_fraction import (
    default_mem_fraction,
    is_vlm,
    max_mem_fraction,
    prefill_graph_sizes,
    vlm_factor,
)
from sparkctl.engines.sglang.launch.memory_terms import (
    GIB,
    MIB,
    draft_kv_size,
    free_before_load,
    kv_bytes,
    kv_cell_bytes,
    mamba_per_req,
    mamba_ratio,
    mm_reservation_mib,
    resolved_strategy,
    ruleset_for,
)
from sparkctl.engines.sglang.launch.model_meta import ModelFacts

__all__ = [
    "default_mem_fraction",
    "max_mem_fraction",
    "prefill_graph_sizes",
    "plan_memory",
    "MemoryInputs",
    "MemoryPlan",
]

ERR_WEIGHTS_TOO_BIG = "WeightsExceedGpu"
ERR_WEIGHTS = "LoadedWeightsNoKv"
ERR_MAMBA = "MambaStateNoMemory"
ERR_KV = "KvPoolEmpty"
ERR_REQS = "MambaTooSmallForRequests"


@dataclass(frozen=True)
class MemoryInputs:
    settings: LaunchSettings
    gpu: GpuFacts  # the smallest GPU the mode runs on
    target: ModelFacts
    draft: ModelFacts | None = None
    sglang_version: str | None = None
    env: dict[str, str] = field(default_factory=dict)  # the container env (SGLANG_* knobs)


@dataclass
class MambaPlan:
    per_req_bytes: int
    ratio: int
    strategy: str
    slots: int  # max_mamba_cache_size (K)
    intermediate_bytes: float  # speculative per-draft-token state scratch
    state_bytes: float  # (K + 1) slots


@dataclass
class MemoryPlan:
    ruleset: str
    gpu: str
    tp: int
    mem_fraction_static: float
    mem_fraction_source: str  # "flag" or "default"
    free_before_load: float  # P (per rank, smallest)
    free_source: str  # which figure P is: probed free memory, MemAvailable, or an assumption
    target_weights_per_rank: float
    draft_weights_per_rank: float
    free_after_load: float  # A
    static_slack: float  # P * (1 - mem_fraction_static): activations, CUDA graphs
    mm_reservation: float  # multimodal embedding cache (+ feature-transport pool)
    rest_after_load: float  # A - slack, before mamba state
    mamba: MambaPlan | None
    kv_budget: float  # what is left for the KV pool
    kv_cell_bytes: int  # per token per rank (target + DFLASH draft)
    kv_cell_draft_bytes: int
    kv_tokens: int
    context_len: int
    max_running_requests: int
    fits: bool
    error_check: str | None = None
    error: str | None = None  # the exact SGLang error text
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    terms: list[str] = field(default_factory=list)  # which SGLang accounting terms were applied

    def to_json(self) -> dict:
        return asdict(self)

    def heading(self) -> str:  # the MemoryReport `fit` renders (engines/support/launch_check.py)
        from sparkctl.engines.sglang.launch import report

        return report.heading(self)

    def rows(self) -> list[tuple[str, str]]:
        from sparkctl.engines.sglang.launch import report

        return report.rows(self)

    def terms_line(self) -> str:
        from sparkctl.engines.sglang.launch import report

        return report.terms_line(self)


def _start(inp: MemoryInputs) -> MemoryPlan:
    """Weights, the static slack and the multimodal reservation: what is left before pools."""
    s, gpu, target, draft = inp.settings, inp.gpu, inp.target, inp.draft
    ruleset, note = ruleset_for(inp.sglang_version)
    notes = [n for n in [note] if n]
    terms: list[str] = []
    mfs, mfs_source = s.mem_fraction_static, "flag"
    if mfs is None:
        mfs, mfs_source = default_mem_fraction(s, gpu, target.is_mla, target), "default"
        terms.append("default mem fraction (memory_hook.py:280)")
        if is_vlm(s, target) and target.vision_hidden is not None:
            terms.append(
                f"vision model: default mem fraction x {vlm_factor(target):.3f} (memory_hook.py:330)"
            )
    P, p_source = free_before_load(gpu)
    if target.weight_bytes is None:
        notes.append(f"{target.name}: no safetensors headers found, weights counted as 0")
    tw = (target.weight_bytes or 0) / s.tp
    dw = ((draft.weight_bytes or 0) / s.tp) if (draft is not None and s.has_spec) else 0.0
    terms.append("target weights / tp" + (" + draft weights / tp" if dw else ""))
    A = P - tw - dw
    slack = P * (1 - mfs)
    terms.append("static slack P x (1 - mem fraction) (kv_cache_configurator.py:3007)")
    mm = mm_reservation_mib(s, target, inp.env) * MIB if ruleset == "0.5.23" else 0
    if mm:
        terms.append(f"multimodal reservation {mm / MIB:.0f} MiB (kv_cache_configurator.py:3034)")
    return MemoryPlan(
        ruleset=ruleset,
        gpu=gpu.name,
        tp=s.tp,
        mem_fraction_static=mfs,
        mem_fraction_source=mfs_source,
        free_before_load=P,
        free_source=p_source,
        target_weights_per_rank=tw,
        draft_weights_per_rank=dw,
        free_after_load=A,
        static_slack=slack,
        mm_reservation=mm,
        rest_after_load=A - slack - mm,
        mamba=None,
        kv_budget=0.0,
        kv_cell_bytes=0,
        kv_cell_draft_bytes=0,
        kv_tokens=0,
        context_len=s.context_length or target.derived_context_len,
        max_running_requests=0,
        fits=False,
        notes=notes,
        terms=terms,
    )


def plan_memory(inp: MemoryInputs) -> MemoryPlan:
    """Mirror SGLang's pool sizing for one rank; the verdict names the error it would raise."""
    s, target, draft = inp.settings, inp.target, inp.draft
    plan = _start(inp)
    ruleset, tp, P, A, rest = (
        plan.ruleset,
        s.tp,
        plan.free_before_load,
        plan.free_after_load,
        plan.rest_after_load,
    )
    if A <= 0:  # the load itself runs out of memory, before any pool is sized
        return _fail(
            plan,
            ERR_WEIGHTS_TOO_BIG,
            (
                f"the weights do not fit: {(plan.target_weights_per_rank + plan.draft_weights_per_rank) / GIB:.2f} "
                f"GiB per rank (tp={tp}) against {P / GIB:.2f} GiB free before load on {plan.gpu}; loading "
                "runs out of memory"
            ),
        )
    mrr = s.effective_max_running_requests
    D = s.draft_tokens(draft.dflash_block_size if draft else None)
    if target.is_hybrid:
        rest, err = _mamba(plan, s, target, rest, mrr, D, ruleset, inp.sglang_version)
        if err:
            return plan
    if ruleset == "0.5.23" and rest <= 0:
        minimum = 1 - A / P
        plan.kv_budget = rest
        return _fail(
            plan,
            ERR_WEIGHTS,
            (
                f"Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static={plan.mem_fraction_static}. "
                f"Raise --mem-fraction-static above {math.ceil(minimum * 1000) / 1000:.3f} (minimum viable = "
                f"1 - available/pre = {minimum:.4f}). If using speculative decoding, draft weights are now counted."
            ),
        )
    plan.kv_budget = rest
    cell = kv_cell_bytes(target, tp, kv_bytes(s.kv_cache_dtype, target))
    if s.kv_cache_dtype == "mxfp8":
        heads = max(1, target.num_kv_heads // tp)
        cell += heads * (target.head_dim + target.v_head_dim) * target.full_attention_layers // 32
    draft_cell = 0
    if draft is not None and s.is_dflash and ruleset == "0.5.12":
        # dflash_utils.scale_kv_cell_size_per_token_for_dflash without a draft geometry: by layers
        layers = target.full_attention_layers
        draft_cell = (cell * (layers + draft.num_layers) + layers - 1) // layers - cell
    elif draft is not None and s.is_dflash:
        draft_cell = kv_cell_bytes(draft, tp, draft_kv_size(s, draft, target), draft.num_layers)
    plan.kv_cell_bytes, plan.kv_cell_draft_bytes = cell + draft_cell, draft_cell
    plan.terms.append(
        "KV bytes/token: target full-attention layers"
        + (f" + {(s.spec_algorithm or 'DFLASH').upper()} draft layers" if draft_cell else "")
        + " (pool_configurator.py)"
    )
    page = s.page_size or 1
    tokens = (max(int(rest), 0) // (cell + draft_cell)) // page * page if rest > 0 else 0
    if s.max_total_tokens is not None:
        tokens = min(tokens, s.max_total_tokens // page * page)
    plan.kv_tokens = tokens
    if tokens <= 0:
        return _fail(plan, ERR_KV, "Not enough memory. Please try to increase --mem-fraction-static.")
    reqs = _max_running_requests(plan, s, mrr, tokens, ruleset)
    if reqs <= 0:
        return plan
    plan.max_running_requests = reqs
    plan.fits = True
    if tokens < plan.context_len:
        plan.warnings.append(
            f"the KV pool holds {tokens} tokens, less than one {plan.context_len}-token request "
            f"(--context-length): long requests will be cut"
        )
    if s.max_running_requests is not None and reqs < s.max_running_requests:
        plan.warnings.append(f"--max-running-requests {s.max_running_requests} is reduced to {reqs}")
    return plan


def _fail(plan: MemoryPlan, check: str, msg: str) -> MemoryPlan:
    plan.fits, plan.error_check, plan.error = False, check, msg
    return plan


def _mamba(
    plan: MemoryPlan,
    s: LaunchSettings,
    m: ModelFacts,
    rest: float,
    mrr: int | None,
    D: int,
    ruleset: str,
    version: str | None,
) -> tuple[float, bool]:
    per_req = mamba_per_req(m, s.tp, s.mamba_ssm_dtype)
    strategy = resolved_strategy(s, m, ruleset)
    ratio = mamba_ratio(s, strategy, version)
    r = s.mamba_full_memory_ratio
    inter = 0.0
    if ruleset == "0.5.12":
        if s.has_spec:
            inter = per_req * (mrr or 0) * D  # handle_max_mamba_cache: per_req * mrr * draft tokens
            rest -= inter
        if s.max_mamba_cache_size is not None:
            K = s.max_mamba_cache_size
        elif s.disable_radix_cache and mrr is not None:
            K = mrr
        else:
            K = int((rest * r / (1 + r)) // per_req)
        state = K * per_req
    else:
        if s.max_mamba_cache_size is not None:
            K = s.max_mamba_cache_size
            if s.has_spec:
                inter = per_req * (min(max(1, mrr or 1), K // ratio) + 1) * D
        elif s.disable_radix_cache and mrr is not None:
            K = max(1, mrr)
            if s.has_spec:
                inter = per_req * (K + 1) * D
        else:
            budget = rest * r / (1 + r)
            if s.has_spec:
                K = int((budget - per_req * (1 + D)) // (per_req * (1 + D / ratio)))
                inter = per_req * (min(max(1, mrr or 1), K // ratio) + 1) * D
            else:
                K = int((budget - per_req) // per_req)
        rest -= inter
        state = (K + 1) * per_req
    plan.terms.append(
        f"mamba state: {count(K)} + 1 slots x {per_req / MIB:.1f} MiB, {ratio} per request ({strategy})"
        + (", speculative scratch" if inter else "")
        + " (kv_cache_configurator.py:3229)"
    )
    plan.mamba = MambaPlan(
        per_req_bytes=per_req,
        ratio=ratio,
        strategy=strategy,
        slots=K,
        intermediate_bytes=inter,
        state_bytes=state,
    )
    if ruleset == "0.5.23" and K <= 0:
        _fail(
            plan,
            ERR_MAMBA,
            (
                "Not enough GPU memory for hybrid (mamba/linear-attention) state cache. "
                f"Computed max_mamba_cache_size={K} (total_rest_memory={rest / GIB:.2f} GB, "
                f"mamba_cache_per_req={per_req / MIB:.2f} MB). Try: (1) reduce --max-running-requests, "
                "(2) increase --mem-fraction-static, (3) reduce --speculative-num-draft-tokens, or "
                "(4) use GPUs with more memory."
            ),
        )
        return rest, True
    return rest - state, False


def _max_running_requests(
    plan: MemoryPlan, s: LaunchSettings, mrr: int | None, tokens: int, ruleset: str
) -> int:
    """kv_cache_configurator.py: resolve_max_num_reqs (0.5.9: init_memory_pool)."""
    estimated = max(min(int(tokens / plan.context_len * 512), 4096), 2048)
    if ruleset == "0.5.12":
        reqs = mrr if mrr is not None else estimated
    else:
        reqs = min(max(1, mrr), tokens // 2) if mrr is not None else min(estimated, tokens // 2)
    if plan.mamba is not None:
        cap = plan.mamba.slots // plan.mamba.ratio
        reqs = min(reqs, cap)
        if reqs <= 0:
            _fail(
                plan,
                ERR_REQS,
                (
                    "Hybrid (mamba/linear-attention) state cache is too small to serve any requests. "
                    f"max_mamba_cache_size={plan.mamba.slots}, mamba_ratio={plan.mamba.ratio}, "
                    f"resulting max_num_reqs={reqs}. Try: (1) reduce --max-running-requests, "
                    "(2) increase --mem-fraction-static, or (3) use GPUs with more memory."
                ),
            )
    return reqs
