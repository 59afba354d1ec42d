"""SGLang 0.5.23's default --mem-fraction-static (srt/arg_groups/memory_hook.py), VLM factor included.

Line numbers are SGLang 0.5.23's; docs/launch-safety.md lists them.
"""

from __future__ import annotations

from sparkctl.engines.sglang.launch.inputs import GB10_MAX_MEM_FRACTION, GpuFacts, LaunchSettings
from sparkctl.engines.sglang.launch.model_meta import ModelFacts

# memory_hook.py:89-170: (GPU memory below GiB, chunked prefill, decode max_bs tp<4, tp>=4)
_GPU_TABLE = [
    (20, 2048, 8, 8),
    (35, 4096, 48, 160),
    (60, 4096, 32, 160),
    (90, 8192, 256, 512),
    (160, 8192, 256, 512),
]


DISCRETE_MAX_MEM_FRACTION = 0.95


def max_mem_fraction(gpu: GpuFacts) -> float:
    """The largest fraction a fix may propose (GB10: the hard-reboot limit, rules.check_mem_fraction)."""
    return GB10_MAX_MEM_FRACTION if gpu.is_gb10 else DISCRETE_MAX_MEM_FRACTION


def is_multimodal(s: LaunchSettings, model: ModelFacts | None) -> bool:
    """model_config.py:820 is_multimodal as the flags leave it (--language-model-only, :674;
    --enable-multimodal for the archs that default it off, :690-717)."""
    if model is None or s.flags.get("language-model-only") is True:
        return False
    if s.flags.get("enable-multimodal") is True:
        from sparkctl.engines.sglang.launch.archs import MULTIMODAL_ARCHS

        return any(a in MULTIMODAL_ARCHS for a in model.architectures)
    return model.is_multimodal


def is_vlm(s: LaunchSettings, model: ModelFacts | None) -> bool:
    """memory_hook.py:283 is_vlm: multimodal, not --language-only, not a decode-only worker."""
    if s.flags.get("language-only") is True or s.flags.get("disaggregation-mode") == "decode":
        return False
    return is_multimodal(s, model)


def vlm_factor(model: ModelFacts) -> float:
    """memory_hook.py:420 adjust_mem_fraction_for_vlm (pre-capture sizing): 0.95 x a factor from
    the ViT size against ViT-L/14 (24 layers x 1024), clamped to [0.8, 1.05]."""
    if model.vision_hidden is None:
        return 1.0
    ratio = model.vision_layers * model.vision_hidden**2 / (24 * 1024**2)
    return 0.95 * max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))


def default_mem_fraction(
    s: LaunchSettings, gpu: GpuFacts, is_mla: bool = False, model: ModelFacts | None = None
) -> float:
    """memory_hook.py:280-344 handle_gpu_memory_settings, pre-capture sizing (post-capture KV
    sizing is off unless SGLANG_ENABLE_POST_CAPTURE_KV_SIZING=1, overrides.py:1803)."""
    mem = float(gpu.memory_mib)
    chunked, max_bs = 16384, 512
    for limit_gib, cp, bs_small_tp, bs_big_tp in _GPU_TABLE:
        if mem < limit_gib * 1024:
            chunked, max_bs = cp, (bs_small_tp if s.tp < 4 else bs_big_tp)
            break
    chunked = s.chunked_prefill_size or chunked
    mrr = s.effective_max_running_requests
    if mrr is not None and max_bs > mrr:  # memory_hook.py:184
        max_bs = mrr
    reserved = 512 + max(chunked, 2048) * 1.5 + s.tp * s.pp / 8 * 1024  # memory_hook.py:306-311
    if not s.disable_cuda_graph:  # reserve_for_graph_mb, memory_hook.py:358
        reserved += max_bs * 2
        if not s.disable_prefill_cuda_graph and s.pp == 1:
            reserved += (1.5 * 1024) if is_mla else len(prefill_graph_sizes(chunked)) * 8
    if mem > 60 * 1024:  # memory_hook.py:313
        reserved = max(reserved, 10 * 1024)
    fraction = round((mem - reserved) / mem, 3)
    if is_vlm(s, model):  # memory_hook.py:330-336
        assert model is not None
        fraction = fraction * vlm_factor(model)
    return fraction


def prefill_graph_sizes(max_bs: int) -> list[int]:
    """cuda_graph_hook.py:480 generate_prefill_cuda_graph_batch_sizes."""
    sizes = (
        list(range(4, 33, 4))
        + list(range(48, 257, 16))
        + list(range(288, 513, 32))
        + list(range(576, 1025, 64))
        + list(range(1280, 4097, 256))
        + list(range(4608, max_bs + 1, 512))
    )
    return [x for x in sizes if x <= max_bs]
