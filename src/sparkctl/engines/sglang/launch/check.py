"""Launch safety as one call: flag validation + rules + memory verdict + fixes that are re-checked.

`check_launch` is pure (the parser result is passed in); the profile/plan adapters that do the
I/O (SGLang parser, model headers, GPU probes) live in `launch/pipeline.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sparkctl.engines.sglang.flags import release
from sparkctl.engines.sglang.launch import explain, rules, rules_attention, rules_dflash
from sparkctl.engines.sglang.launch.fixes import MemoryFix, memory_fixes, serves, tradeoffs, with_headroom
from sparkctl.engines.sglang.launch.flags import FlagCheck, flag_findings
from sparkctl.engines.sglang.launch.inputs import FlagValue, GpuFacts, LaunchSettings, with_flags
from sparkctl.engines.sglang.launch.memory import MemoryInputs, MemoryPlan, plan_memory
from sparkctl.engines.sglang.launch.memory_terms import GIB, ruleset_for
from sparkctl.engines.sglang.launch.model_meta import ModelFacts
from sparkctl.engines.support.launch_check import LaunchCheck, Margin
from sparkctl.findings import Finding, Severity

MEMORY_CHECK = "MemoryFit"
__all__ = [
    "LaunchCheck",
    "LaunchContext",
    "MemoryFix",
    "accepted",
    "check_launch",
    "context_for",
]


@dataclass(frozen=True)
class LaunchContext:
    """Everything besides the argv that the checks read."""

    gpus: list[GpuFacts]  # every GPU of the mode (one entry per GPU, or one per node)
    gpus_per_node: dict[str, int]  # every box of the mode, once
    target: ModelFacts | None = None
    draft: ModelFacts | None = None
    sglang_version: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    margin: Margin = Margin()
    group_nnodes: int | None = None  # nodes of one replica group (None: every node, one group)
    slots_per_node: dict[str, int] = field(default_factory=dict)  # ranks of all replicas per box

    @property
    def nnodes(self) -> int:
        return max(self.group_nnodes or len(self.gpus_per_node), 1)

    @property
    def smallest_gpu(self) -> GpuFacts | None:
        return min(self.gpus, key=lambda g: g.available_mib or g.memory_mib) if self.gpus else None


def rule_findings(argv: list[str], ctx: LaunchContext, values: bool = False) -> list[Finding]:
    """Every rule; `values`: also the numeric-value syntax (when SGLang's parser did not run)."""
    s = LaunchSettings.from_argv(argv)
    ruleset, _ = ruleset_for(ctx.sglang_version)
    out = rules.check_values(s) if values else []
    out += rules.check_version(s, ruleset)
    out += rules_dflash.check_dflash(s, ctx.target, ctx.draft, ruleset)
    out += rules.check_context(s, ctx.target, ctx.draft, ctx.env)
    out += rules.check_mem_fraction(s, ctx.gpus)
    out += rules.check_tp(s, ctx.gpus_per_node, ctx.group_nnodes, ctx.slots_per_node)
    held = _group_gpus(ctx) if ctx.gpus_per_node else None
    out += rules.check_heads(s, ctx.target, max_tp=held) + (
        rules.check_heads(s, ctx.draft, "draft", max_tp=held) if s.is_dflash else []
    )
    out += rules.check_sleep_on_idle(s)
    if ctx.gpus:
        out += rules_attention.check_attention(s, ctx.gpus, ctx.target, ctx.draft)
    else:
        out.append(
            Finding(
                "AttentionBackendArch",
                Severity.SKIP,
                "GPU generation unknown",
                fix="set nodes[].gpu in the profile or run preflight",
            )
        )
    return out


def memory_inputs(argv: list[str], ctx: LaunchContext, headroom: bool = False) -> MemoryInputs | None:
    gpu = ctx.smallest_gpu
    if gpu is None or ctx.target is None:
        return None
    if headroom:
        gpu = with_headroom(gpu, ctx.margin.headroom_mib)
    return MemoryInputs(
        settings=LaunchSettings.from_argv(argv),
        gpu=gpu,
        target=ctx.target,
        draft=ctx.draft,
        sglang_version=ctx.sglang_version,
        env=ctx.env,
    )


def memory_plan(argv: list[str], ctx: LaunchContext, headroom: bool = False) -> MemoryPlan | None:
    inp = memory_inputs(argv, ctx, headroom)
    return plan_memory(inp) if inp is not None else None


def accepted(argv: list[str], ctx: LaunchContext) -> bool:
    """No rule error, and the memory plan serves the load with the headroom: what a fix must satisfy."""
    if any(f.severity == Severity.ERROR for f in rule_findings(argv, ctx)):
        return False
    plan = memory_plan(argv, ctx, headroom=True)
    return plan is None or serves(
        plan, ctx.margin.required(LaunchSettings.from_argv(argv).max_running_requests)
    )


def _planner(ctx: LaunchContext):  # a Planner (fixes.py)
    def plan_ok(argv: list[str]) -> MemoryPlan | None:
        if any(f.severity == Severity.ERROR for f in rule_findings(argv, ctx)):
            return None
        return memory_plan(argv, ctx, headroom=True)

    return plan_ok


def check_launch(
    argv: list[str],
    ctx: LaunchContext,
    flag_check: FlagCheck | None = None,
    node: str | None = None,
    expected: dict[str, str] | None = None,
) -> LaunchCheck:
    findings: list[Finding] = []
    if flag_check is not None:
        findings += flag_findings(flag_check, node, expected)
    parsed = flag_check is not None and flag_check.method != "skipped"
    findings += rule_findings(argv, ctx, values=not parsed)
    rule_fix: dict[str, FlagValue | None] = {}
    for f in findings:
        if f.severity == Severity.ERROR and f.data.get("fix_flags"):
            rule_fix.update(f.data["fix_flags"])
    plan = memory_plan(argv, ctx)
    if plan is None:
        findings.append(
            Finding(
                MEMORY_CHECK,
                Severity.SKIP,
                "memory not planned: "
                + ("no GPU facts" if ctx.smallest_gpu is None else "target model config not found"),
                fix=(
                    "set nodes[].gpu in the profile or run where the node is reachable"
                    if ctx.smallest_gpu is None
                    else "make config.json + safetensors headers reachable (HF cache, "
                    "model.target.local_dir, or `sparkctl fit --target-dir/--draft-dir`)"
                ),
            )
        )
        return LaunchCheck(findings, None, [], rule_fix)
    fixed_argv = with_flags(argv, rule_fix)
    want = ctx.margin.required(LaunchSettings.from_argv(argv).max_running_requests)
    fixed_plan = memory_plan(fixed_argv, ctx, headroom=True)
    fixes: list[MemoryFix] = []
    if not serves(fixed_plan, want):
        inp = memory_inputs(fixed_argv, ctx)
        assert inp is not None
        fixes = memory_fixes(fixed_argv, inp, ctx.margin, _planner(ctx))
        if not fixes:
            fixes = tradeoffs(fixed_argv, inp, ctx.margin, _planner(ctx), ctx.nnodes, _group_gpus(ctx))
    settings = LaunchSettings.from_argv(argv)
    drafted = settings.draft_tokens(ctx.draft.dflash_block_size if ctx.draft else None)
    for f in fixes:
        f.why = f"{f.why}; gives up: {explain.cost(f.changes, plan, settings, want, drafted)}"
    why = explain.cause(plan, settings, want, drafted)
    findings += memory_findings(
        plan, fixes, bool(rule_fix) and serves(fixed_plan, want), want, ctx.margin, why
    )
    fix = dict(rule_fix)
    if fixes and not fixes[0].tradeoff:
        fix.update(fixes[0].changes)
    return LaunchCheck(findings, plan, fixes, fix)


def memory_findings(
    plan: MemoryPlan,
    fixes: list[MemoryFix],
    fixed_by_rules: bool,
    want: int,
    margin: Margin,
    cause: str | None = None,
) -> list[Finding]:
    """The verdict; an error or a short load says in one sentence what broke the budget (`cause`)."""
    because = f" Why: {cause}." if cause else ""
    data = {
        "cause": cause,
        "ruleset": plan.ruleset,
        "kv_tokens": plan.kv_tokens,
        "max_running_requests": plan.max_running_requests,
        "free_source": plan.free_source,
        "terms": plan.terms,
        "required_requests": want,
        "headroom_mib": margin.headroom_mib,
        "fixes": [{"flags": f.changes, "why": f.why, "tradeoff": f.tradeoff} for f in fixes],
    }
    fix = _fix_text(fixes, fixed_by_rules, want, margin)
    out: list[Finding] = []
    used = f"SGLang {plan.ruleset} rules, P = {plan.free_source}"
    if not plan.fits:
        out.append(
            Finding(
                MEMORY_CHECK,
                Severity.ERROR,
                f"{used}: this launch would die with: {plan.error}{because}",
                fix=fix,
                data=data,
            )
        )
    elif plan.max_running_requests < want:
        out.append(
            Finding(
                MEMORY_CHECK,
                Severity.WARN,
                (
                    f"starts, but serves only {plan.max_running_requests} running request(s), fewer than {want} "
                    f"({plan.kv_tokens} KV tokens; {used}).{because}"
                ),
                fix=fix,
                data=data,
            )
        )
    elif fixes:  # serves the load as measured, but not with the headroom a fix must leave
        out.append(
            Finding(
                MEMORY_CHECK,
                Severity.WARN,
                f"fits with less than {margin.headroom_mib} MiB to spare: {plan.kv_tokens} KV tokens, "
                f"{plan.max_running_requests} running requests ({used})",
                fix=fix,
                data=data,
            )
        )
    else:
        out.append(
            Finding(
                MEMORY_CHECK,
                Severity.OK,
                (
                    f"fits: {plan.kv_tokens} KV tokens, {plan.max_running_requests} running requests, "
                    f"{plan.rest_after_load / GIB:.2f} GiB after weights ({used})"
                ),
                data=data,
            )
        )
    for w in plan.warnings:
        out.append(Finding(MEMORY_CHECK, Severity.WARN, w))
    return out


def _fix_text(fixes: list[MemoryFix], fixed_by_rules: bool, want: int, margin: Margin) -> str:
    real = [f for f in fixes if not f.tradeoff]
    if real:
        return "; or ".join(f"{f.flags} ({f.why})" for f in real)
    if fixed_by_rules:
        return "it serves the load once the rule fixes above are applied"
    offers = "; or ".join(f"{f.flags} ({f.why})" for f in fixes)
    return f"no flag change serves {want} running requests with {margin.headroom_mib} MiB headroom" + (
        f"; trade-offs: {offers}" if offers else "; use GPUs with more memory or a smaller model"
    )


def _group_gpus(ctx: LaunchContext) -> int:
    """GPUs one replica group can use: those of its nodes (every box of the mode when one group)."""
    per_node = sorted(ctx.gpus_per_node.values(), reverse=True) or [1]
    return sum(per_node[: ctx.nnodes])


def gpu_facts_for(
    profile, node_names: list[str], probed: dict[str, list[GpuFacts]] | None = None
) -> tuple[list[GpuFacts], dict[str, int]]:  # Profile, lazy
    gpus: list[GpuFacts] = []
    per_node: dict[str, int] = {}
    for name in dict.fromkeys(node_names):  # a box holding two replicas counts once
        node = profile.node(name)
        per_node[name] = node.gpus
        if probed and probed.get(name):
            gpus += probed[name]
            per_node[name] = len(probed[name])
        elif node.gpu is not None:
            gpus.append(GpuFacts.from_profile(node.gpu))
    return gpus, per_node


def context_for(
    plan,
    profile,
    *,
    target: ModelFacts | None,
    draft: ModelFacts | None,
    probed: dict[str, list[GpuFacts]] | None = None,
    margin: Margin | None = None,
) -> LaunchContext:
    gpus, per_node = gpu_facts_for(profile, plan.nodes, probed)
    env = {**profile.engine.env, **profile.modes[plan.mode].env}
    return LaunchContext(
        gpus=gpus,
        gpus_per_node=per_node,
        target=target,
        draft=draft,
        sglang_version=release(profile),
        env=env,
        margin=margin or Margin(),
        group_nnodes=plan.nnodes,
        slots_per_node={n: plan.nodes.count(n) for n in per_node},
    )
