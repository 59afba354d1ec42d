"""The one launch-check pipeline `plan --check`, `fit` and `preflight` run: SGLang's parser (in the
image first, a local SGLang as fallback), the rules, the memory planner with fixes.

This is the I/O side: the profile and plan are read, models are looked up on disk, GPUs are
probed when a node is reachable; `check.check_launch` does the judging.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.findings import Finding, Severity
from sparkctl.launch.check import LaunchCheck, LaunchContext, check_launch, context_for
from sparkctl.launch.fixes import Margin
from sparkctl.launch.flags import RunInImage, check_flags
from sparkctl.launch.inputs import GpuFacts, server_flags
from sparkctl.launch.layouts import needs_layouts, propose_layouts
from sparkctl.launch.model_meta import ModelFacts, find_model_facts, load_model_facts

Progress = Callable[[str], None]


@dataclass
class ModelLookup:
    target: ModelFacts | None
    draft: ModelFacts | None
    searched: dict[str, list[str]] = field(default_factory=dict)  # role -> paths looked at

    def missing(self, profile) -> list[str]:  # Profile
        roles = ["target"] + (["draft"] if profile.model.draft is not None else [])
        return [r for r in roles if getattr(self, r) is None]


def gpu_facts_for(
    profile, node_names: list[str], probed: dict[str, list[GpuFacts]] | None = None
) -> tuple[list[GpuFacts], dict[str, int]]:  # Profile, lazy
    gpus: list[GpuFacts] = []
    per_node: dict[str, int] = {}
    for name in node_names:
        node = profile.node(name)
        per_node[name] = node.gpus
        if probed and probed.get(name):
            gpus += probed[name]
            per_node[name] = len(probed[name])
        elif node.gpu is not None:
            gpus.append(GpuFacts.from_profile(node.gpu))
    return gpus, per_node


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

    if progress:
        progress(f"probing GPU memory on {', '.join(nodes)}")
    results = fan_out(nodes, one)
    return {node: gpus for node, gpus in results.ok.items() if gpus}


def model_search_paths(profile) -> list[Path]:
    paths = [Path(os.path.expanduser(profile.model.hf_cache))]
    for node in profile.nodes:
        if node.is_local and node.hf_cache:
            paths.append(Path(os.path.expanduser(node.hf_cache)))
    if os.environ.get("HF_HOME"):
        paths.append(Path(os.environ["HF_HOME"]))
    paths.append(Path.home() / ".cache" / "huggingface")
    return list(dict.fromkeys(paths))


def lookup_models(profile, target_dir: Path | None = None, draft_dir: Path | None = None) -> ModelLookup:
    m = profile.model
    search = model_search_paths(profile)
    existing = [p for p in search if p.is_dir()]
    out = ModelLookup(None, None)
    for role, ref, given in (("target", m.target, target_dir), ("draft", m.draft, draft_dir)):
        if ref is None:
            continue
        given = given or (Path(ref.local_dir).expanduser() if ref.local_dir else None)
        if given is not None:
            out.searched[role] = [str(given)]
            facts = load_model_facts(given, ref.id) if (given / "config.json").is_file() else None
        else:
            out.searched[role] = [str(p) for p in search]
            facts = find_model_facts(ref.id, ref.revision, existing)
        setattr(out, role, facts)
    return out


def resolve_models(
    profile, target_dir: Path | None = None, draft_dir: Path | None = None
) -> tuple[ModelFacts | None, ModelFacts | None]:
    found = lookup_models(profile, target_dir, draft_dir)
    return found.target, found.draft


def expected_versions(plan, profile) -> dict[str, str]:
    """The SGLang versions the launch declares: engine.sglang_version and the image tag."""
    from sparkctl.launch.inputs import parse_version

    out: dict[str, str] = {}
    if profile.engine.sglang_version:
        out["the profile (engine.sglang_version)"] = profile.engine.sglang_version
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


class ModelNotFound(SparkctlError):
    """`fit` has nothing to plan: the model's config.json is not on this machine."""

    exit_code = ExitCode.CHECK_FAILED


def require_models(found: ModelLookup, profile) -> None:  # Profile
    missing = found.missing(profile)
    if not missing:
        return
    refs = {"target": profile.model.target, "draft": profile.model.draft}
    where = "; ".join(
        f"{r} {refs[r].id}: searched {', '.join(found.searched.get(r, [])) or 'nothing'}" for r in missing
    )
    raise ModelNotFound(
        f"model not on this machine, nothing was checked ({where})",
        fix="download it (`huggingface-cli download <id>`), copy it here with `sparkctl ship --weights`, point "
        "at a directory with `--target-dir/--draft-dir`, or pass --allow-missing to check the flags only",
    )


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
    from sparkctl.errors import ConnectError
    from sparkctl.launch.in_image import image_runner

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
        from sparkctl.errors import ConnectError
        from sparkctl.launch.in_image import image_runner

        rank0 = plan.ranks[0]
        try:
            runner = image_runner(
                pool.get(rank0.node), rank0.image, timeout_s=parser_timeout, node=rank0.node
            )
        except ConnectError:
            runner = None  # the connection findings say why; the local parser is tried instead
    return check_plan(plan, profile, run_in_image=runner, probed=probed).findings
