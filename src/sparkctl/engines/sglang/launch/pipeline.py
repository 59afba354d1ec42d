"""The one launch-check pipeline `plan --check`, `fit` and `preflight` run: SGLang's parser (in the
image first, a local SGLang as fallback), the rules, the memory planner with fixes.

This is the I/O side: the profile and plan are read, models are looked up on disk, GPUs are
probed when a node is reachable; `check.check_launch` does the judging.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sparkctl.engines.sglang.flags import release
from sparkctl.engines.sglang.launch.check import (
    LaunchContext,
    check_launch,
    context_for,
    memory_plan,
)
from sparkctl.engines.sglang.launch.flags import check_flags
from sparkctl.engines.sglang.launch.inputs import GpuFacts, server_flags
from sparkctl.engines.sglang.launch.layouts import needs_layouts, propose_layouts
from sparkctl.engines.sglang.launch.model_meta import load_model_facts
from sparkctl.engines.support.in_image import RunInImage
from sparkctl.engines.support.launch_check import LaunchCheck, LaunchRequest, Margin, Serving
from sparkctl.engines.support.models import ModelLookup, require_models
from sparkctl.engines.support.models import lookup_models as find_models
from sparkctl.findings import Finding, Severity

Progress = Callable[[str], None]
PARSER = "SGLang's parser"  # how the in-image runner names what it runs


def gpu_facts_from_report(report, node: str, profile_gpu=None) -> list[GpuFacts]:
    """A probed GpuReport (facts/gpu.py) as GpuFacts: free memory per discrete GPU, MemAvailable
    on unified memory (report.with_meminfo must have been applied)."""
    out: list[GpuFacts] = []
    for g in report.gpus:
        cap = g.compute_cap or (profile_gpu.compute_capability if profile_gpu else None)
        if cap is None:
            continue
        major, minor = (int(x) for x in cap.split("."))
        unified = report.unified_memory
        total = g.memory_total_mib or (int(profile_gpu.memory_gib * 1024) if profile_gpu else None)
        avail = report.mem_available_mib if unified else g.memory_free_mib
        total = total or avail
        if total is None:
            continue
        out.append(
            GpuFacts(
                name=g.name,
                memory_mib=total,
                capability=(major, minor),
                unified=unified,
                available_mib=avail,
                probed_on=node,
            )
        )
    return out


def probe_gpus(
    pool, nodes: list[str], profile, progress: Progress | None = None
) -> dict[str, list[GpuFacts]]:
    """nvidia-smi + /proc/meminfo on each reachable node; unreachable nodes are left out."""
    from sparkctl.facts.gpu import MEMINFO_ARGV, QUERY_ARGV, parse_meminfo, report_from_smi
    from sparkctl.fanout import fan_out

    def one(node: str) -> list[GpuFacts]:
        conn = pool.get(node)  # ConnectError: the node is left out (profile facts are used)
        smi = conn.run(list(QUERY_ARGV), timeout=20)
        if smi.rc != 0:
            return []
        mem = conn.run(list(MEMINFO_ARGV), timeout=10)
        report = report_from_smi(smi.stdout).with_meminfo(parse_meminfo(mem.stdout) if mem.rc == 0 else None)
        return gpu_facts_from_report(report, node, profile.node(node).gpu)

    nodes = list(dict.fromkeys(nodes))  # one probe per box, however many replicas it holds
    if progress:
        progress(f"probing GPU memory on {', '.join(nodes)}")
    results = fan_out(nodes, one)
    return {node: gpus for node, gpus in results.ok.items() if gpus}


def lookup_models(profile, target_dir: Path | None = None, draft_dir: Path | None = None) -> ModelLookup:
    """The profile's models on this machine, as the memory planner's ModelFacts."""
    return find_models(profile, target_dir, draft_dir, load=load_model_facts)


def expected_versions(plan, profile) -> dict[str, str]:
    """The SGLang versions the launch declares: engine.options.version and the image tag."""
    from sparkctl.engines.sglang.launch.inputs import parse_version

    out: dict[str, str] = {}
    declared = release(profile)
    if declared:
        out["the profile (engine.options.version)"] = declared
    ref = plan.ranks[0].image
    tag = ref.rsplit(":", 1)[1] if ":" in ref.rsplit("/", 1)[-1] else ""
    if parse_version(tag) is not None:
        out[f"the image tag ({ref})"] = tag
    return out


def check_plan(
    plan,
    profile,
    *,
    run_in_image: RunInImage | None = None,
    target_dir: Path | None = None,
    draft_dir: Path | None = None,
    probed: dict[str, list[GpuFacts]] | None = None,
    parse_flags: bool = True,
    margin: Margin | None = None,
    models: ModelLookup | None = None,
    progress: Progress | None = None,
    build=None,
) -> LaunchCheck:
    """All launch checks for a Plan: parser (image, then local), rules, memory with fixes."""
    found = models or lookup_models(profile, target_dir, draft_dir)
    ctx: LaunchContext = context_for(
        plan, profile, target=found.target, draft=found.draft, probed=probed, margin=margin
    )
    argv = plan.ranks[0].argv
    flag_result = None
    if parse_flags:
        if progress and run_in_image is None:
            progress("checking flags with a local SGLang parser")
        flag_result = check_flags(server_flags(argv), run_in_image, progress=progress)
    result = check_launch(
        argv, ctx, flag_result, node=plan.ranks[0].node, expected=expected_versions(plan, profile)
    )
    nodes = list(dict.fromkeys(plan.nodes))
    single = len(nodes) > 1 and all(profile.node(n).gpus == 1 for n in nodes)
    if build is not None and single and needs_layouts(result.findings):  # build: planning's build_plan
        result.layouts = propose_layouts(
            profile, nodes, found.target, found.draft, build=build, probed=probed, margin=margin
        )
    if not parse_flags:
        result.findings.insert(
            0,
            Finding(
                "FlagsValid",
                Severity.SKIP,
                "flag names not checked with SGLang's parser here (`sparkctl plan --check` or `fit` does)",
            ),
        )
    return result


def check_reachable(
    plan,
    profile,
    *,
    reach: bool = True,
    parser_timeout: float = 30.0,
    parse_flags: bool = True,
    progress: Progress | None = None,
    **kwargs,
) -> LaunchCheck:
    """check_plan with what a reachable node adds: its probed GPU memory and the image's parser
    (rank 0's node). Unreachable nodes fall back to the profile's GPU facts and a local parser."""
    if not reach:
        return check_plan(plan, profile, parse_flags=parse_flags, progress=progress, **kwargs)
    from sparkctl.connectors import NodePool
    from sparkctl.engines.support.in_image import image_runner
    from sparkctl.errors import ConnectError

    with NodePool(profile) as pool:
        probed = probe_gpus(pool, plan.nodes, profile, progress)
        runner = None
        if parse_flags:
            rank0 = plan.ranks[0]
            try:
                runner = image_runner(
                    pool.get(rank0.node),
                    rank0.image,
                    timeout_s=parser_timeout,
                    node=rank0.node,
                    progress=progress,
                    what=PARSER,
                )
            except ConnectError as exc:
                if progress:
                    progress(f"{rank0.node} not reachable ({exc.message}): no in-image parser")
        return check_plan(
            plan,
            profile,
            run_in_image=runner,
            probed=probed,
            parse_flags=parse_flags,
            progress=progress,
            **kwargs,
        )


def preflight_findings(
    plan, profile, pool=None, gpu_reports: dict | None = None, parser_timeout: float = 30.0
) -> list[Finding]:
    """What preflight adds to its own checks: the same pipeline, with the GPU reports it already
    probed (free memory / MemAvailable) and the image's parser on rank 0's node."""
    probed = {
        n: gpu_facts_from_report(r, n, profile.node(n).gpu)
        for n, r in (gpu_reports or {}).items()
        if r is not None
    }
    runner = None
    if pool is not None:
        from sparkctl.engines.support.in_image import image_runner
        from sparkctl.errors import ConnectError

        rank0 = plan.ranks[0]
        try:
            runner = image_runner(
                pool.get(rank0.node), rank0.image, timeout_s=parser_timeout, node=rank0.node, what=PARSER
            )
        except ConnectError:
            runner = None  # the connection findings say why; the local parser is tried instead
    return check_plan(plan, profile, run_in_image=runner, probed=probed).findings


def launch_check(plan, profile, request: LaunchRequest) -> LaunchCheck:
    """`fit` and `plan --check`: the models on this machine (refused when `request.require_models`
    and one is missing), then the whole pipeline as far as `request.reach` goes."""
    models = lookup_models(profile, request.target_dir, request.draft_dir)
    if request.require_models:
        require_models(models, profile)
    return check_reachable(
        plan,
        profile,
        reach=request.reach,
        parser_timeout=request.parser_timeout,
        parse_flags=request.parse_flags,
        models=models,
        margin=request.margin,
        progress=request.progress,
        build=request.build,
    )


def serving_at(profile, argv: list[str], node: str, fraction: float, available: int) -> Serving | None:
    """What the memory planner says one rank's argv serves at `fraction` of `available` bytes on a
    unified-memory GB10 (None: the model's facts are not on this machine)."""
    from sparkctl.engines.sglang.launch.inputs import with_flags

    found = lookup_models(profile)
    if found.target is None:
        return None
    mib = available // (1 << 20)
    gpu = GpuFacts("budget", mib, (12, 1), unified=True, available_mib=mib, probed_on=node)
    ctx = LaunchContext([gpu], {node: 1}, found.target, found.draft, release(profile))
    mp = memory_plan(with_flags(argv, {"mem-fraction-static": f"{fraction:g}"}), ctx)
    if mp is None:
        return None
    return Serving(
        mp.max_running_requests, mp.kv_tokens, mp.context_len, mp.fits and mp.kv_tokens >= mp.context_len
    )
