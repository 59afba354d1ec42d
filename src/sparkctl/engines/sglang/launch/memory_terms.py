"""The accounting terms of SGLang's memory pools: KV cell sizes, mamba state, free memory, reservations.

Pure functions the planner (`launch/memory.py`) combines; each names the SGLang function it
mirrors (rule sets and source files: memory.py's docstring, docs/launch-safety.md).
"""

from __future__ import annotations

from sparkctl.engines.sglang.launch.inputs import GpuFacts, LaunchSettings, parse_version
from sparkctl.engines.sglang.launch.mem_fraction import is_multimodal
from sparkctl.engines.sglang.launch.model_meta import ModelFacts

GIB = 1 << 30
MIB = 1 << 20
# Not in any config: what a CUDA context + NCCL take before SGLang measures free memory on a
# discrete GPU, and what the OS keeps on a unified-memory box. Probed values replace both.
CUDA_CONTEXT_MIB = 512
UNIFIED_OS_RESERVE_MIB = 8192
MAMBA_EXTRA_BUFFER_ARCHS = {  # srt/arg_groups/overrides.py: _MAMBA_EXTRA_BUFFER_ARCHS (those modelled)
    "Qwen3NextForCausalLM",
    "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MoeForConditionalGeneration",
    "Qwen3_5ForCausalLM",
    "Qwen3_5MoeForCausalLM",
    "KimiLinearForCausalLM",
}
KV_DTYPE_BYTES = {
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "mxfp8": 1,
    "bf16": 2,
    "bfloat16": 2,
    "nvfp4": 0.5,
    "fp4_mx_block16": 0.5,
}
STATE_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def ruleset_for(version: str | None) -> tuple[str, str | None]:
    """(rule set, note): 0.5.12 and older use the old formulas; everything else 0.5.23's."""
    v = parse_version(version)
    if v is None:
        return "0.5.23", "SGLang version unknown: used the 0.5.23 rules"
    if v <= (0, 5, 12):
        exact = v in ((0, 5, 9), (0, 5, 12))
        return "0.5.12", None if exact else f"SGLang {version}: used the 0.5.12 rules (read in 0.5.9/0.5.12)"
    if v == (0, 5, 23):
        return "0.5.23", None
    return "0.5.23", f"SGLang {version}: used the 0.5.23 rules (source read: 0.5.9, 0.5.12, 0.5.16, 0.5.23)"


def kv_bytes(kv_cache_dtype: str, model: ModelFacts) -> float:
    """srt/mem_cache/kv_cache_dtype.py: configure_kv_cache_dtype (auto = model dtype, or FP8 when
    the checkpoint's quant config says kv_cache_quant_algo FP8)."""
    if kv_cache_dtype == "auto":
        return 1 if model.kv_cache_quant_fp8 else model.dtype_bytes
    return KV_DTYPE_BYTES.get(kv_cache_dtype, 2)


def kv_cell_bytes(model: ModelFacts, tp: int, kv_size: float, num_layers: int | None = None) -> int:
    """pool_configurator.py: DefaultPoolConfigurator._compute_cell_size (MHA/GQA branch)."""
    layers = model.full_attention_layers if num_layers is None else num_layers
    heads = max(1, model.num_kv_heads // tp)  # model_config.get_num_kv_heads
    return int(heads * (model.head_dim + model.v_head_dim) * layers * kv_size)


def draft_kv_size(s: LaunchSettings, draft: ModelFacts, target: ModelFacts) -> float:
    """draft_kv_budget.py + kv_cache_dtype.py: the draft resolves its own KV dtype; a fa4 draft
    cannot read quantized KV and gets the compute dtype."""
    name = s.draft_kv_cache_dtype or s.kv_cache_dtype
    size = draft.dtype_bytes if name == "auto" else KV_DTYPE_BYTES.get(name, 2)
    if draft_backend(s) == "fa4" and size != draft.dtype_bytes:
        size = draft.dtype_bytes
    return size


def draft_backend(s: LaunchSettings) -> str | None:
    return s.draft_attention_backend or s.decode_attention_backend or s.attention_backend


def mamba_per_req(model: ModelFacts, tp: int, ssm_dtype: str | None) -> int:
    """configs/mamba_utils.py: Mamba2StateShape.create + BaseLinearStateParams.mamba_cache_per_req
    (conv state bf16; SSM state dtype: --mamba-ssm-dtype > config mamba_ssm_dtype > float32)."""
    lin = model.linear
    assert lin is not None
    n_groups = lin.num_k_heads
    if n_groups % tp:
        n_groups += tp - n_groups  # extra_groups_for_head_shards, copied as written
    conv_dim = lin.v_head_dim * lin.num_v_heads + 2 * n_groups * lin.k_head_dim
    conv_numel = (conv_dim // tp) * (lin.conv_kernel - 1)
    ssm_numel = (lin.num_v_heads // tp) * lin.v_head_dim * lin.k_head_dim
    ssm_bytes = STATE_DTYPE_BYTES.get(ssm_dtype or model.mamba_ssm_dtype or "float32", 4)
    return (conv_numel * 2 + ssm_numel * ssm_bytes) * model.linear_layers


def resolved_strategy(s: LaunchSettings, model: ModelFacts, ruleset: str) -> str:
    """overrides.py: _mamba_radix_cache_resolution ('auto' -> extra_buffer when the overlap
    schedule is on and the arch supports it). 0.5.12 and older resolved 'auto' to no_buffer."""
    if s.mamba_strategy != "auto":
        return s.mamba_strategy
    if ruleset == "0.5.12":
        return "no_buffer"
    wants = not s.disable_overlap_schedule or (s.page_size or 1) > 1
    supported = any(a in MAMBA_EXTRA_BUFFER_ARCHS for a in model.architectures)
    return "extra_buffer" if wants and supported else "no_buffer"


def mamba_ratio(s: LaunchSettings, strategy: str, version: str | None) -> int:
    """Mamba state slots per running request: kv_cache_configurator.py _calculate_mamba_ratio +
    allocation_sizing.get_mamba_tracking_slots (0.5.9: 3 + (spec ? 1 : 2) with extra_buffer)."""
    if s.disable_radix_cache:
        return 1
    if not strategy.startswith("extra_buffer"):
        return 3
    v = parse_version(version)
    if v is not None and v <= (0, 5, 9):
        return 3 + (1 if s.has_spec else 2)
    if strategy == "extra_buffer_lazy":
        return 4
    return 3 + (1 if s.disable_overlap_schedule else 2)


def free_before_load(gpu: GpuFacts) -> tuple[float, str]:
    """P and which figure it is: what SGLang measures before loading (get_available_gpu_memory;
    integrated GPUs report psutil.virtual_memory().available, i.e. MemAvailable)."""
    where = f" on {gpu.probed_on}" if gpu.probed_on else ""
    if gpu.available_mib is not None:
        what = "MemAvailable" if gpu.unified else "free GPU memory"
        return gpu.available_mib * MIB, f"{what} probed{where}: {gpu.available_mib} MiB"
    if gpu.unified:
        return (gpu.memory_mib - UNIFIED_OS_RESERVE_MIB) * MIB, (
            f"assumed MemAvailable = {gpu.memory_mib} - {UNIFIED_OS_RESERVE_MIB} MiB (not probed: "
            "run preflight or fit where the node is reachable)"
        )
    return (gpu.memory_mib - CUDA_CONTEXT_MIB) * MIB, (
        f"assumed {gpu.memory_mib} - {CUDA_CONTEXT_MIB} MiB CUDA context before load (not probed: "
        "run preflight or fit where the node is reachable)"
    )


def mm_reservation_mib(s: LaunchSettings, model: ModelFacts, env: dict[str, str]) -> int:
    """kv_cache_configurator.py:202 mm_runtime_reservation_gb: SGLANG_VLM_CACHE_SIZE_MB (100,
    environ.py:1598) for a multimodal model, + SGLANG_MM_FEATURE_CACHE_MB (1024, environ.py:1622)
    when the feature transport is cuda_ipc/cuda_vmm (serving_hook.py:800: cpu unless asked)."""
    if not is_multimodal(s, model):
        return 0
    reserved = _env_int(env, "SGLANG_VLM_CACHE_SIZE_MB", 100)
    transport = s.flags.get("mm-feature-transport")
    if transport is None and env.get("SGLANG_USE_CUDA_IPC_TRANSPORT", "") not in ("", "0", "false", "False"):
        transport = "cuda_ipc"
    if transport in ("cuda_ipc", "cuda_vmm"):
        reserved += _env_int(env, "SGLANG_MM_FEATURE_CACHE_MB", 1024)
    return reserved


def _env_int(env: dict[str, str], name: str, default: int) -> int:
    value = env.get(name, "")
    return int(value) if value.isdigit() else default
