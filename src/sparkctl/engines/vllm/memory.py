"""A memory model for vLLM's `--gpu-memory-utilization` (U), per GPU of a rank. Pure.

vLLM (0.32, vllm/v1/worker/gpu_worker.py) takes U x the GPU's total memory as its budget, refuses
to start when less than that is free, loads its share of the weights, profiles one forward pass
(activation peak), captures CUDA graphs, and gives what is left to the KV cache, which must hold
at least one `--max-model-len` sequence. Modelled here:
  1. GB10 (unified memory): U above the cap hard-rebooted a Spark while loading (recipe.md).
  2. U x total must be free now (the GPU report's free memory; on unified memory the host's
     MemAvailable): else vLLM exits at start.
  3. Weights / (tp x pp) (safetensors bytes in the local HF cache; with the --speculative-config
     draft's own, except for MTP, which reuses the target's layers) must fit U x total.
  4. KV for one max-model-len sequence (2 x layers x KV heads per rank x head_dim x dtype bytes,
     from config.json; plus a DFlash/DSpark draft's own layers at its kv_cache_dtype) must fit what
     the weights leave.
Not modelled: the activation peak and CUDA-graph memory (vLLM measures them at start; on small
margins it still fails there), other processes' growth after preflight, MoE/quantization
scales beyond what the safetensors files weigh, hybrid (Mamba/sliding) KV layouts, LoRA.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkctl.engines.support.launch_check import DEFAULT_HEADROOM_MIB
from sparkctl.engines.vllm import flags as F
from sparkctl.engines.vllm import speculative
from sparkctl.engines.vllm.memory_fixes import Budget, kv_fixes, weights_fixes
from sparkctl.findings import Finding, Severity

if TYPE_CHECKING:
    from sparkctl.engines.base import LaunchRank
    from sparkctl.facts.gpu import GpuReport
    from sparkctl.profile.schema import Node

MEMORY = "VllmMemory"
GIB = 1 << 30
KV_BYTES = {"auto": 2, "bfloat16": 2, "float16": 2, "half": 2, "float32": 4}


def _kv_bytes(argv: list[str], config: dict) -> int:
    kv = "auto"
    for i, word in enumerate(argv[:-1]):
        if word == "--kv-cache-dtype":
            kv = argv[i + 1]
    if kv.startswith("fp8"):
        return 1
    return KV_BYTES.get(kv, 2) if kv != "auto" else (4 if config.get("torch_dtype") == "float32" else 2)


def kv_bytes_per_token(config: dict, tp: int, argv: list[str]) -> int | None:
    """KV-cache bytes one token takes on one GPU of a TP group (None: config lacks the sizes)."""
    text = config.get("text_config", config)
    layers, heads = text.get("num_hidden_layers"), text.get("num_attention_heads")
    if not layers or not heads:
        return None
    kv_heads = text.get("num_key_value_heads") or heads
    head_dim = text.get("head_dim") or (text.get("hidden_size", 0) // heads)
    per_rank = max(1, kv_heads // tp)  # vLLM replicates KV heads when tp > kv heads
    return 2 * layers * per_rank * head_dim * _kv_bytes(argv, config)


def _budget(node: Node, report: GpuReport | None) -> tuple[float | None, float | None]:
    """(total, free) bytes of the smallest GPU of the node; unified memory: the host's."""
    total = node.gpu.memory_gib * GIB if node.gpu and node.gpu.memory_gib else None
    free = None
    if report is not None:
        if report.unified_memory and report.mem_available_mib:
            free = report.mem_available_mib * (1 << 20)
        sized = [g for g in report.gpus if g.memory_total_mib]
        if sized:
            g = min(sized, key=lambda x: x.memory_total_mib or 0)
            total = (g.memory_total_mib or 0) * (1 << 20)
            free = g.memory_free_mib * (1 << 20) if g.memory_free_mib is not None else free
    return total, free


def _max_model_len(argv: list[str], config: dict | None) -> int | None:
    for i, word in enumerate(argv[:-1]):
        if word == "--max-model-len":
            try:
                return int(argv[i + 1])
            except ValueError:
                return None
    return (config or {}).get("max_position_embeddings")


def _int_arg(argv: list[str], flag: str, default: int = 1) -> int:
    for i, word in enumerate(argv[:-1]):
        if word == flag:
            try:
                return int(argv[i + 1])
            except ValueError:
                return default
    return default


def _error(index: int, rank: LaunchRank, message: str, fix: str) -> Finding:
    return Finding(MEMORY, Severity.ERROR, message, fix=fix, node=rank.node, rank=index)


def memory_model(
    index: int,
    rank: LaunchRank,
    node: Node,
    fraction: float,
    report: GpuReport | None,
    model_bytes: int | None,
    config: dict | None,
    draft: tuple[int | None, dict | None] = (None, None),
) -> Finding | None:
    flag = f"--{F.MEM_FLAG} {fraction:g}"
    if node.gpu is not None and node.gpu.unified_memory and fraction > F.GB10_MAX_MEM_FRACTION:
        return _error(
            index,
            rank,
            f"{flag} on unified memory: above {F.GB10_MAX_MEM_FRACTION} a GB10 can hard-reboot while loading",
            f"set engine.args {F.MEM_FLAG}: {F.GB10_MAX_MEM_FRACTION} or lower",
        )
    total, free = _budget(node, report)
    if total is None:
        return None  # no size known: nothing to model
    want = fraction * total
    if free is not None and want > free:
        return _error(
            index,
            rank,
            f"{flag} asks {want / GIB:.1f} GiB but only {free / GIB:.1f} GiB are free: vLLM refuses to start",
            f"lower {F.MEM_FLAG} to {max(0.05, free / total - 0.02):.2f} or free the GPU",
        )
    if model_bytes is None:
        return None
    tp = _int_arg(rank.argv, "--tensor-parallel-size")
    spec = speculative.parse(rank.argv)
    doc = spec if isinstance(spec, dict) else {}
    draft_bytes, draft_config = draft
    drafted = draft_bytes if doc.get("model") and not speculative.reuses_target(doc) else 0
    weights = (model_bytes + (drafted or 0)) / max(1, tp * _int_arg(rank.argv, "--pipeline-parallel-size"))
    left = want - weights
    unified = bool(node.gpu and node.gpu.unified_memory)
    budget = Budget(total, free, fraction, weights, unified)
    if left <= 0:
        text = (config or {}).get("text_config", config or {})
        one_node = _int_arg(rank.argv, "--nnodes") <= 1
        return _error(
            index,
            rank,
            f"{flag} gives {want / GIB:.1f} GiB per GPU; its share of the weights alone is {weights / GIB:.1f} GiB",
            weights_fixes(
                budget,
                tp,
                node.gpus if one_node else tp,
                node.name,
                text.get("num_attention_heads"),
                text.get("num_key_value_heads"),
            ),
        )
    per_token = kv_bytes_per_token(config or {}, tp, rank.argv)
    if per_token:  # a DFlash/DSpark draft's own KV, one slot per target token
        per_token += speculative.draft_kv_bytes_per_token(
            doc, draft_config, tp, _kv_bytes(rank.argv, config or {})
        )
    seq = _max_model_len(rank.argv, config)
    if per_token and seq and per_token * seq > left:
        return _error(
            index,
            rank,
            f"--max-model-len {seq}: one sequence needs {per_token * seq / GIB:.2f} GiB of KV cache, "
            f"more than the {left / GIB:.2f} GiB {flag} leaves after the weights ({weights / GIB:.2f} GiB "
            "per GPU; before activations)",
            kv_fixes(budget, per_token, seq, _kv_bytes(rank.argv, config or {}) == 1),
        )
    return _thin(index, rank, flag, budget, left - (per_token or 0) * (seq or 0))


def _thin(index: int, rank: LaunchRank, flag: str, b: Budget, spare: float) -> Finding | None:
    """A launch that fits with less than the headroom to spare (a warn: fit's margin): free memory
    another process's growth takes before the start, or KV beyond one sequence for activations."""
    headroom = DEFAULT_HEADROOM_MIB * (1 << 20)
    want = b.fraction * b.total
    if b.free is not None and b.free - want < headroom:
        what = f"{flag} asks {want / GIB:.2f} GiB with {b.free / GIB:.2f} GiB free"
        lower = int((b.free - headroom) / b.total * 100) / 100
        fix = f"--{F.MEM_FLAG} {lower:.2f} (1 GiB stays free for other processes), or free the GPU"
    elif spare < headroom:
        what = f"{flag} leaves {spare / GIB:.2f} GiB after the weights and one --max-model-len sequence's KV"
        fix = f"lower --max-model-len or raise {F.MEM_FLAG} (activations and CUDA graphs come out of it)"
    else:
        return None
    return Finding(
        MEMORY,
        Severity.WARN,
        f"{what}: under the {DEFAULT_HEADROOM_MIB} MiB headroom fit keeps",
        fix=fix,
        node=rank.node,
        rank=index,
    )
