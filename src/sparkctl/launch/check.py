"""Launch safety as one call: flag validation + rules + memory verdict + a fix that is re-checked.

`check_launch` is pure (the parser result is passed in); `check_plan` adapts a Plan + Profile and
does the I/O (SGLang parser, model headers).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from sparkctl.findings import Finding, Severity
from sparkctl.launch import rules
from sparkctl.launch.flags import FlagCheck, RunInImage, check_flags, flag_findings
from sparkctl.launch.inputs import FlagValue, GpuFacts, LaunchSettings, server_flags, with_flags
from sparkctl.launch.memory import (
    GIB,
    MemoryInputs,
    MemoryPlan,
    default_mem_fraction,
    max_mem_fraction,
    plan_memory,
    ruleset_for,
)
from sparkctl.launch.model_meta import ModelFacts, find_model_facts, load_model_facts

MEMORY_CHECK = "MemoryFit"


@dataclass(frozen=True)
class LaunchContext:
    """Everything besides the argv that the checks read."""

    gpus: list[GpuFacts]  # every GPU of the mode (one entry per GPU, or one per node)
    gpus_per_node: dict[str, int]
    target: ModelFacts | None = None
    draft: ModelFacts | None = None
    sglang_version: str | None = None
    env: dict[str, str] = field(default_factory=dict)

    @property
    def smallest_gpu(self) -> GpuFacts | None:
        return min(self.gpus, key=lambda g: g.available_mib or g.memory_mib) if self.gpus else None


@dataclass
class MemoryFix:
    changes: dict[str, FlagValue | None]
    plan: MemoryPlan
    why: str

    @property
    def flags(self) -> str:
        return " ".join(
            f"--{k} {v}" if v is not True else f"--{k}" for k, v in self.changes.items() if v is not None
        )


@dataclass
class LaunchCheck:
    findings: list[Finding]
    memory: MemoryPlan | None
    memory_fixes: list[MemoryFix]
    fix: dict[str, FlagValue | None]  # rule fixes + the first memory fix: what `fit` proposes

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == Severity.ERROR]


def rule_findings(argv: list[str], ctx: LaunchContext) -> list[Finding]:
    s = LaunchSettings.from_argv(argv)
    ruleset, _ = ruleset_for(ctx.sglang_version)
    out = rules.check_version(s, ruleset)
    out += rules.check_dflash(s, ctx.target, ctx.draft, ruleset)
    out += rules.check_context(s, ctx.target, ctx.draft, ctx.env)
    out += rules.check_mem_fraction(s, ctx.gpus)
    out += rules.check_tp(s, ctx.gpus_per_node)
    out += rules.check_sleep_on_idle(s)
    if ctx.gpus:
        out += rules.check_attention(s, ctx.gpus, ctx.target, ctx.draft)
    else:
        out.append(Finding("AttentionBackendArch", Severity.SKIP, "GPU generation unknown",
                           fix="set nodes[].gpu in the profile or run preflight"))  # fmt: skip
    return out


def memory_plan(argv: list[str], ctx: LaunchContext) -> MemoryPlan | None:
    gpu = ctx.smallest_gpu
    if gpu is None or ctx.target is None:
        return None
    s = LaunchSettings.from_argv(argv)
    return plan_memory(MemoryInputs(settings=s, gpu=gpu, target=ctx.target, draft=ctx.draft,
                                    sglang_version=ctx.sglang_version))  # fmt: skip


def accepted(argv: list[str], ctx: LaunchContext) -> bool:
    """No rule error and the memory plan fits: what a proposed fix must satisfy."""
    if any(f.severity == Severity.ERROR for f in rule_findings(argv, ctx)):
        return False
    plan = memory_plan(argv, ctx)
    return plan is None or plan.fits


def memory_fixes(argv: list[str], ctx: LaunchContext) -> list[MemoryFix]:
    """Single-flag fixes (smallest mem fraction, largest draft tokens, largest max running
    requests, an FP8 KV cache), each accepted by the planner and the rules; else one combined fix."""
    s = LaunchSettings.from_argv(argv)
    gpu = ctx.smallest_gpu
    assert gpu is not None and ctx.target is not None
    cap = max_mem_fraction(gpu)
    out: list[MemoryFix] = []

    def try_(changes: dict[str, FlagValue | None]) -> MemoryPlan | None:
        cand = with_flags(argv, changes)
        plan = memory_plan(cand, ctx)
        return plan if plan is not None and plan.fits and accepted(cand, ctx) else None

    start = s.mem_fraction_static or default_mem_fraction(s, gpu, ctx.target.is_mla)
    m = round(start + 0.01, 2)
    while m <= cap + 1e-9:
        plan = try_({"mem-fraction-static": f"{m:.2f}"})
        if plan:
            out.append(
                MemoryFix({"mem-fraction-static": f"{m:.2f}"}, plan, "smallest mem fraction that fits")
            )
            break
        m = round(m + 0.01, 2)
    if s.has_spec:
        d0 = s.draft_tokens(ctx.draft.dflash_block_size if ctx.draft else None)
        for d in range(d0 - 1, 0, -1):
            ch: dict[str, FlagValue | None] = {"speculative-num-draft-tokens": str(d)}
            if s.dflash_block_size is not None:
                ch["speculative-dflash-block-size"] = str(d)
            plan = try_(ch)
            if plan:
                out.append(MemoryFix(ch, plan, "largest draft token count that fits"))
                break
    mrr0 = s.effective_max_running_requests or 0
    lo, hi, best = 1, mrr0 - 1, None
    while lo <= hi:  # fitting is monotone in max running requests
        mid = (lo + hi) // 2
        plan = try_({"max-running-requests": str(mid)})
        if plan:
            best, lo = (mid, plan), mid + 1
        else:
            hi = mid - 1
    if best:
        out.append(
            MemoryFix(
                {"max-running-requests": str(best[0])}, best[1], "largest max running requests that fits"
            )
        )
    if s.kv_cache_dtype in ("auto", "bf16", "bfloat16") and not ctx.target.kv_cache_quant_fp8:
        plan = try_({"kv-cache-dtype": "fp8_e4m3"})
        if plan:
            out.append(MemoryFix({"kv-cache-dtype": "fp8_e4m3"}, plan, "FP8 KV cache halves KV bytes"))
    if not out:
        combined = _combined_fix(argv, ctx, s, cap, try_)
        if combined:
            out.append(combined)
    return out


def _combined_fix(argv, ctx, s, cap, try_) -> MemoryFix | None:  # noqa: ANN001 - private helper
    changes: dict[str, FlagValue | None] = {"mem-fraction-static": f"{cap:.2f}"}
    if s.kv_cache_dtype in ("auto", "bf16", "bfloat16"):
        changes["kv-cache-dtype"] = "fp8_e4m3"
    steps: list[dict[str, FlagValue | None]] = [{}]
    if s.has_spec:
        steps += [{"speculative-num-draft-tokens": str(d)} for d in (8, 4, 2)]
    for n in (16, 8, 4, 2, 1):
        steps.append({"max-running-requests": str(n)})
    for step in steps:
        changes = {**changes, **step}
        plan = try_(changes)
        if plan:
            return MemoryFix(dict(changes), plan, "no single change fits; this combination does")
    return None


def check_launch(argv: list[str], ctx: LaunchContext, flag_check: FlagCheck | None = None,
                 node: str | None = None) -> LaunchCheck:  # fmt: skip
    findings: list[Finding] = []
    if flag_check is not None:
        findings += flag_findings(flag_check, node)
    findings += rule_findings(argv, ctx)
    rule_fix: dict[str, FlagValue | None] = {}
    for f in findings:
        if f.severity == Severity.ERROR and f.data.get("fix_flags"):
            rule_fix.update(f.data["fix_flags"])
    plan = memory_plan(argv, ctx)
    fixes: list[MemoryFix] = []
    if plan is None:
        findings.append(Finding(MEMORY_CHECK, Severity.SKIP, "memory not planned: "
                                + ("no GPU facts" if ctx.smallest_gpu is None else "target model config not found"),
                                fix="set nodes[].gpu and make config.json + safetensors headers reachable "
                                "(HF cache, model.target.local_dir, or `sparkctl fit --target-dir/--draft-dir`)"))  # fmt: skip
        return LaunchCheck(findings, None, [], rule_fix)
    fixed_argv = with_flags(argv, rule_fix)
    fixed_plan = memory_plan(fixed_argv, ctx) if rule_fix else plan
    if fixed_plan is not None and not fixed_plan.fits:
        fixes = memory_fixes(fixed_argv, ctx)
    fixed_by_rules = bool(rule_fix) and fixed_plan is not None and fixed_plan.fits
    findings += memory_findings(plan, fixes, fixed_by_rules)
    fix = dict(rule_fix)
    if fixes:
        fix.update(fixes[0].changes)
    return LaunchCheck(findings, plan, fixes, fix)


def memory_findings(plan: MemoryPlan, fixes: list[MemoryFix], fixed_by_rules: bool = False) -> list[Finding]:
    data = {"ruleset": plan.ruleset, "kv_tokens": plan.kv_tokens, "max_running_requests": plan.max_running_requests,
            "fixes": [{"flags": f.changes, "why": f.why} for f in fixes]}  # fmt: skip
    out: list[Finding] = []
    if not plan.fits:
        fix = "; or ".join(f"{f.flags} ({f.why})" for f in fixes) or (
            "it fits once the rule fixes above are applied"
            if fixed_by_rules
            else "use GPUs with more memory or a smaller model"
        )
        out.append(Finding(MEMORY_CHECK, Severity.ERROR, f"SGLang {plan.ruleset} rules: this launch would die with: "
                           f"{plan.error}", fix=fix, data=data))  # fmt: skip
    else:
        out.append(Finding(MEMORY_CHECK, Severity.OK, (
            f"fits: {plan.kv_tokens} KV tokens, {plan.max_running_requests} running requests, "
            f"{plan.rest_after_load / GIB:.2f} GiB after weights (SGLang {plan.ruleset} rules)"), data=data))  # fmt: skip
    for w in plan.warnings:
        out.append(Finding(MEMORY_CHECK, Severity.WARN, w))
    return out


# ---------------------------------------------------------------- profile/plan adapters (I/O)


def gpu_facts_for(profile, node_names: list[str], probed: dict[str, list[GpuFacts]] | None = None
                  ) -> tuple[list[GpuFacts], dict[str, int]]:  # noqa: ANN001 - Profile, lazy  # fmt: skip
    gpus: list[GpuFacts] = []
    per_node: dict[str, int] = {}
    for name in node_names:
        node = profile.node(name)
        per_node[name] = node.gpus
        if probed and name in probed:
            gpus += probed[name]
            per_node[name] = len(probed[name])
        elif node.gpu is not None:
            gpus.append(GpuFacts.from_profile(node.gpu))
    return gpus, per_node


def model_search_paths(profile) -> list[Path]:  # noqa: ANN001
    paths = [Path(os.path.expanduser(profile.model.hf_cache))]
    for node in profile.nodes:
        if node.is_local and node.hf_cache:
            paths.append(Path(os.path.expanduser(node.hf_cache)))
    if os.environ.get("HF_HOME"):
        paths.append(Path(os.environ["HF_HOME"]))
    paths.append(Path.home() / ".cache" / "huggingface")
    return [p for p in dict.fromkeys(paths) if p.is_dir()]


def resolve_models(profile, target_dir: Path | None = None, draft_dir: Path | None = None
                   ) -> tuple[ModelFacts | None, ModelFacts | None]:  # noqa: ANN001  # fmt: skip
    search = model_search_paths(profile)
    m = profile.model
    target_dir = target_dir or (Path(m.target.local_dir).expanduser() if m.target.local_dir else None)
    if m.draft is not None and m.draft.local_dir:
        draft_dir = draft_dir or Path(m.draft.local_dir).expanduser()
    target = (
        load_model_facts(target_dir, m.target.id)
        if target_dir
        else find_model_facts(m.target.id, m.target.revision, search)
    )
    draft = None
    if m.draft is not None:
        draft = (
            load_model_facts(draft_dir, m.draft.id)
            if draft_dir
            else find_model_facts(m.draft.id, m.draft.revision, search)
        )
    return target, draft


def context_for(plan, profile, *, target: ModelFacts | None, draft: ModelFacts | None,
                probed: dict[str, list[GpuFacts]] | None = None) -> LaunchContext:  # noqa: ANN001  # fmt: skip
    gpus, per_node = gpu_facts_for(profile, plan.nodes, probed)
    env = {**profile.engine.env, **profile.modes[plan.mode].env}
    return LaunchContext(gpus=gpus, gpus_per_node=per_node, target=target, draft=draft,
                         sglang_version=profile.engine.sglang_version, env=env)  # fmt: skip


def check_plan(plan, profile, *, run_in_image: RunInImage | None = None, target_dir: Path | None = None,
               draft_dir: Path | None = None, probed: dict[str, list[GpuFacts]] | None = None,
               parse_flags: bool = True) -> LaunchCheck:  # noqa: ANN001  # fmt: skip
    """All launch checks for a Plan: the lead wires `run_in_image` to the Docker connector."""
    target, draft = resolve_models(profile, target_dir, draft_dir)
    ctx = context_for(plan, profile, target=target, draft=draft, probed=probed)
    argv = plan.ranks[0].argv
    flag_result = check_flags(server_flags(argv), run_in_image) if parse_flags else None
    return check_launch(argv, ctx, flag_result, node=plan.ranks[0].node)
