"""vLLM launch safety for preflight: flags through vLLM's own parser in the image, GPU-arch rules,
and a memory model for `--gpu-memory-utilization` (docs/engines.md says what is and is not modelled).

Nothing here imports vLLM: the parser runs inside the serving image on rank 0's node (no network,
no GPU, removed after), exactly as the engine will parse the line.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from sparkctl.engines.base import LaunchTarget
from sparkctl.engines.vllm import flags as F
from sparkctl.findings import Finding, Severity

if TYPE_CHECKING:
    from sparkctl.connectors.pool import NodePool
    from sparkctl.engines.support.launch_check import LaunchCheck, LaunchRequest
    from sparkctl.facts.gpu import GpuReport
    from sparkctl.profile.schema import Profile

FLAGS, ARCH, MEMORY = "VllmFlags", "VllmGpuArch", "VllmMemory"
CHECK_NAMES = frozenset({FLAGS, ARCH, MEMORY})

# Run as `python3 -c PARSER <serve args>` in the image: vLLM's serve parser and its pre-load checks.
PARSER = """
import sys
try:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
except ImportError:  # vLLM < 0.30
    from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve", usage="vllm serve [model_tag] [options]"))
validate_parsed_serve_args(parser.parse_args(sys.argv[1:]))
print("vllm-flags-ok")
"""
MIN_CC = (7, 0)  # vLLM's CUDA kernels: Volta and newer
FP8_CC = (8, 9)  # FP8 KV cache / W8A8 FP8 need Ada, Hopper or Blackwell
PARSER_TIMEOUT_S = 120.0  # importing vLLM's CLI takes 10-30 s on a busy host


def serve_args(argv: list[str], command: list[str]) -> list[str]:
    """What follows `vllm serve` in a rank's argv, without --config (a secret file the parser's
    container does not have; its only keys are sparkctl's own)."""
    rest = argv[len(command) :]
    out: list[str] = []
    skip = False
    for word in rest:
        if skip:
            skip = False
            continue
        if word == "--config":
            skip = True
            continue
        out.append(word)
    return out


def _arg(argv: list[str], flag: str) -> str | None:
    for i, word in enumerate(argv):
        if word == f"--{flag}" and i + 1 < len(argv):
            return argv[i + 1]
        if word.startswith(f"--{flag}="):
            return word.partition("=")[2]
    return None


def flag_findings(plan: LaunchTarget, profile: Profile, pool: NodePool | None) -> list[Finding]:
    if pool is None:
        return [
            Finding(
                FLAGS,
                Severity.SKIP,
                "flags not checked: no connection to rank 0's node",
                fix="run where rank 0's node answers (vLLM's parser runs in its image)",
            )
        ]
    from sparkctl.engines.support.in_image import InImageError, image_runner

    rank0 = plan.ranks[0]
    run = image_runner(
        pool.get(rank0.node), rank0.image, node=rank0.node, what="vLLM's parser", timeout_s=PARSER_TIMEOUT_S
    )
    args = serve_args(rank0.argv, list(profile.engine.command or F.DEFAULT_COMMAND))
    try:
        code, out, err = run(["python3", "-c", PARSER, *args])
    except InImageError as exc:
        return [Finding(FLAGS, Severity.WARN, f"flags not checked: {exc}", node=rank0.node)]
    if code == 0 and "vllm-flags-ok" in out:
        return [Finding(FLAGS, Severity.OK, f"vLLM's parser in {rank0.image} accepts rank 0's flags")]
    lines = [x for x in err.strip().splitlines() if x.strip()]
    why = lines[-1] if lines else f"exit code {code}"
    return [
        Finding(
            FLAGS,
            Severity.ERROR,
            f"vLLM's parser in {rank0.image} refuses rank 0's flags: {why}",
            fix="fix engine.args / modes.<mode>.args (`vllm serve --help` in the image lists them)",
            node=rank0.node,
            rank=0,
        )
    ]


def _cc(text: str | None) -> tuple[int, int] | None:
    try:
        major, minor = (text or "").split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return None


def arch_findings(plan: LaunchTarget, profile: Profile) -> list[Finding]:
    out: list[Finding] = []
    kv = _arg(plan.ranks[0].argv, "kv-cache-dtype") or "auto"
    for node_name in dict.fromkeys(r.node for r in plan.ranks):
        gpu = profile.node(node_name).gpu
        cc = _cc(gpu.compute_capability if gpu else None)
        if cc is None:
            continue
        if cc < MIN_CC:
            out.append(
                Finding(
                    ARCH,
                    Severity.ERROR,
                    f"sm{cc[0]}{cc[1]} is older than vLLM supports (7.0+)",
                    fix="serve from a Volta or newer GPU",
                    node=node_name,
                )
            )
        elif kv.startswith("fp8") and cc < FP8_CC:
            out.append(
                Finding(
                    ARCH,
                    Severity.ERROR,
                    f"--kv-cache-dtype {kv} needs sm89 or newer; this GPU is sm{cc[0]}{cc[1]}",
                    fix="drop kv-cache-dtype (auto) on this GPU",
                    node=node_name,
                )
            )
    return out or [Finding(ARCH, Severity.OK, "every GPU's architecture runs these flags")]


def memory_findings(
    plan: LaunchTarget,
    profile: Profile,
    reports: Mapping[str, GpuReport | None],
    model_bytes: int | None = None,
    config: dict | None = None,
    draft: tuple[int | None, dict | None] = (None, None),
) -> list[Finding]:
    """--gpu-memory-utilization against what each node has: see `memory_model` (draft: the
    --speculative-config draft's weights and config.json, when on this machine)."""
    from sparkctl.engines.vllm.memory import memory_model

    out: list[Finding] = []
    for index, rank in enumerate(plan.ranks):
        fraction = F.mem_fraction(rank.argv) or F.DEFAULT_MEM_FRACTION
        node = profile.node(rank.node)
        finding = memory_model(
            index, rank, node, fraction, reports.get(rank.node), model_bytes, config, draft
        )
        if finding is not None:
            out.append(finding)
    return out or [Finding(MEMORY, Severity.OK, "--gpu-memory-utilization fits every node")]


def _model_facts(profile: Profile, role: str = "target") -> tuple[int | None, dict | None]:
    """Weights' size (safetensors headers) and config.json of the target (or the draft), found
    where `fit` looks (the profile's HF caches, HF_HOME, ~/.cache/huggingface; None: not here)."""
    from sparkctl.engines.support.models import lookup_models, safetensors_bytes

    snap = getattr(lookup_models(profile), role)
    if snap is None:
        return None, None
    try:
        config = json.loads((snap / "config.json").read_text())
    except (OSError, ValueError):
        config = None
    return safetensors_bytes(snap) or None, config


def launch_findings(
    plan: LaunchTarget, profile: Profile, pool: NodePool | None, reports: dict[str, GpuReport | None]
) -> list[Finding]:
    from sparkctl.engines.vllm import speculative

    model_bytes, config = _model_facts(profile)
    draft = _model_facts(profile, "draft") if profile.model.draft is not None else (None, None)
    return [
        *flag_findings(plan, profile, pool),
        *speculative.findings(plan.ranks[0].argv),
        *arch_findings(plan, profile),
        *memory_findings(plan, profile, reports, model_bytes, config, draft),
    ]


def launch_check(plan: LaunchTarget, profile: Profile, request: LaunchRequest) -> LaunchCheck:
    """`fit` and `plan --check`: over SSH when rank 0's node answers (its image's parser), else
    offline (the rules and memory model alone). No memory plan or fixes: see memory.py."""
    from sparkctl.engines.support.launch_check import LaunchCheck
    from sparkctl.engines.support.models import lookup_models, require_models
    from sparkctl.errors import ConnectError

    if request.require_models:
        require_models(lookup_models(profile, request.target_dir, request.draft_dir), profile)
    findings = None
    if request.reach:
        from sparkctl.connectors import NodePool

        try:
            with NodePool(profile) as pool:
                findings = launch_findings(plan, profile, pool, {})
        except ConnectError:
            findings = None  # unreachable: judged offline below
    if findings is None:
        findings = launch_findings(plan, profile, None, {})
    return LaunchCheck(findings=findings)
