"""Attention-backend rules: each backend SGLang would pick (or was given) against each GPU generation.

Part of the launch rules (`launch/rules.py` has the rest, `launch/rules_dflash.py` the DFLASH
ones); every rule cites the SGLang 0.5.23 file it mirrors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sparkctl.engines.sglang.launch.inputs import GpuFacts, LaunchSettings
from sparkctl.engines.sglang.launch.model_meta import ModelFacts
from sparkctl.engines.sglang.launch.rules import ERROR, WARN
from sparkctl.engines.sglang.launch.rules import rule_finding as _f
from sparkctl.findings import Finding, Severity

CHECK = "AttentionBackendArch"
# srt/arg_groups/choices.py: DRAFT_ATTENTION_BACKEND_CHOICES
DRAFT_ATTENTION_BACKENDS = ("flashinfer", "fa3", "fa4", "triton", "ascend", "trtllm_mha", "intel_xpu")
FA3_ERROR = (
    "FlashAttention v3 Backend requires SM>=80 and SM<=90. Please use `--attention-backend flashinfer`."
)
FA4_SOURCE = "srt/kernels/ops/attention/flash_attn/cute/interface.py"
TRTLLM_SOURCE = "srt/arg_groups/attention_hook.py"


def default_attention_backend(gpu: GpuFacts, target: ModelFacts | None, s: LaunchSettings) -> str:
    """model_override_base.py: get_default_attn_backend (CUDA, non-MLA): fa3 on Hopper, trtllm_mha
    (fa4 with asymmetric K/V) on SM100, else flashinfer. Qwen3.5 hybrids on SM100: qwen3_5.py."""
    major = gpu.capability[0]
    mla = target.is_mla if target else False
    if major == 9:
        return "fa3"
    if major == 10 and not mla:
        asym = target is not None and target.head_dim != target.v_head_dim
        return "fa4" if asym else "trtllm_mha"
    if major == 10:
        return "flashinfer"
    return "triton" if mla else "flashinfer"


def target_backends(s: LaunchSettings, gpu: GpuFacts, target: ModelFacts | None) -> tuple[str, str]:
    base = s.attention_backend or default_attention_backend(gpu, target, s)
    return s.prefill_attention_backend or base, s.decode_attention_backend or base


@dataclass(frozen=True)
class _Use:
    """One backend on one GPU in one role: what the per-backend rules read."""

    gpu: GpuFacts
    model: ModelFacts | None
    role: str
    kv_cache_dtype: str
    flag: str

    @property
    def sm(self) -> tuple[int, int]:
        return self.gpu.capability

    @property
    def head(self) -> int | None:
        return self.model.head_dim if self.model else None

    @property
    def mla(self) -> bool:
        return bool(self.model and self.model.is_mla)

    def to_flashinfer(self, sev: Severity, msg: str, source: str | None = None) -> Finding:
        """A finding whose fix switches this backend's flag to flashinfer."""
        data: dict = {"fix_flags": {self.flag.lstrip("-"): "flashinfer"}}
        if source is not None:
            data["source"] = source
        return _f(CHECK, sev, msg, f"{self.flag} flashinfer", **data)


def _fa3(u: _Use) -> Finding | None:
    """layers/attention/attention_registry.py: create_flashattention_v3_backend."""
    major, minor = u.sm
    if not ((major == 8 and not u.mla) or major == 9):
        msg = f"{u.role}: fa3 on {u.gpu.name} (sm{major}{minor}): SGLang asserts '{FA3_ERROR}'"
        return u.to_flashinfer(ERROR, msg, "srt/layers/attention/attention_registry.py")
    if major == 8 and minor != 0 and u.head and u.head > 128:
        msg = (
            f"{u.role}: fa3 on sm{major}{minor} with head_dim {u.head}: the sm86/sm89 "
            "shared memory is too small for large head dims (kernels/ops/attention/flash_attention_v3.py)"
        )
        return u.to_flashinfer(WARN, msg)
    return None


def _fa4(u: _Use) -> Finding | None:
    """kernels/ops/attention/flash_attn/cute/interface.py (_flash_attn_fwd, _validate_head_dims)."""
    (major, minor), head = u.sm, u.head
    if major < 8:
        msg = (
            f"{u.role}: fa4 on compute capability {major}.{minor}: 'Unsupported compute "
            "capability. Supported: 8.x, 9.x, 10.x, 11.x'"
        )
        return u.to_flashinfer(ERROR, msg, FA4_SOURCE)
    if major == 8:
        msg = (
            f"{u.role}: fa4 on {u.gpu.name} (sm{major}{minor}): SGLang's KV cache is "
            "paged and FA4's SM8x path asserts 'paged KV not supported on SM 8.0' at the first "
            "forward, after the weights have loaded; FA3/FA4 do not serve consumer Ampere/Ada cards"
        )
        return u.to_flashinfer(ERROR, msg, FA4_SOURCE)
    if major == 9 and head and head > 256 and head != 512:
        msg = f"{u.role}: fa4 on SM90 supports head_dim 8..256 (or 512), model has {head}"
        return u.to_flashinfer(ERROR, msg, FA4_SOURCE)
    if major in (10, 11) and head and not (head <= 128 or head in (192, 256) or (u.mla and head == 512)):
        msg = f"{u.role}: fa4 on SM100/SM110 supports head_dim <= 128, 192/128 or 256/256; model has {head}"
        return u.to_flashinfer(ERROR, msg, FA4_SOURCE)
    if major == 10 and not u.mla:
        msg = f"{u.role}: fa4 on SM100 forces --page-size 128 (srt/arg_groups/overrides.py: _fa4_page_constraint)"
        return _f(CHECK, WARN, msg)
    return None


def _trtllm_mha(u: _Use) -> Finding | None:
    """srt/arg_groups/attention_hook.py: handle_attention_backend_compatibility."""
    major, minor = u.sm
    if major not in (9, 10, 12):
        sglang = (
            "TRTLLM MHA backend for prefill requires Hopper (SM90), Blackwell (SM100), or SM120 GPUs. "
            "Please use a different prefill backend."
        )
        msg = f"{u.role}: trtllm_mha on {u.gpu.name} (sm{major}{minor}): '{sglang}'"
        return u.to_flashinfer(ERROR, msg, TRTLLM_SOURCE)
    if major == 12 and u.kv_cache_dtype == "fp8_e4m3" and u.role.startswith("target"):
        msg = (
            f"{u.role}: 'TRTLLM FMHAv2 prefill on SM120 does not support fp8_e4m3 KV cache or skip-softmax.'"
        )
        return u.to_flashinfer(ERROR, msg, TRTLLM_SOURCE)
    return None


# The backends with GPU-generation limits; any other backend passes.
_BACKEND_RULES: dict[str, Callable[[_Use], Finding | None]] = {
    "fa3": _fa3,
    "fa4": _fa4,
    "trtllm_mha": _trtllm_mha,
}


def backend_vs_gpu(
    backend: str,
    gpu: GpuFacts,
    model: ModelFacts | None,
    *,
    role: str,
    kv_cache_dtype: str = "auto",
    flag: str = "--attention-backend",
) -> list[Finding]:
    """One attention backend against one GPU generation."""
    rule = _BACKEND_RULES.get(backend)
    found = rule(_Use(gpu, model, role, kv_cache_dtype, flag)) if rule else None
    return [found] if found else []


def check_attention(
    s: LaunchSettings, gpus: list[GpuFacts], target: ModelFacts | None, draft: ModelFacts | None
) -> list[Finding]:
    out: list[Finding] = []
    seen: set[tuple] = set()
    for gpu in gpus:
        if (gpu.capability, gpu.name) in seen:
            continue
        seen.add((gpu.capability, gpu.name))
        prefill, decode = target_backends(s, gpu, target)
        out += _target_backends_vs_gpu(s, gpu, target, prefill, decode)
        if s.attention_backend == "fa3" and s.kv_cache_dtype == "fp8_e5m2":
            out.append(
                _f(
                    CHECK,
                    WARN,
                    "fa3 only reads fp8_e4m3 KV; SGLang switches the "
                    "attention backend to triton (srt/arg_groups/overrides.py: _attention_backend_fa3_fp8_fallback)",
                    "--kv-cache-dtype fp8_e4m3",
                )
            )
        out += _hybrid_on_blackwell(gpu, target, prefill, decode)
        if s.is_dflash:
            out += _draft_backend(s, gpu, decode, draft)
    return out


def _target_backends_vs_gpu(
    s: LaunchSettings, gpu: GpuFacts, target: ModelFacts | None, prefill: str, decode: str
) -> list[Finding]:
    """The target's prefill and decode backends (once each when they are the same one)."""
    flags = {
        "prefill": "--prefill-attention-backend" if s.prefill_attention_backend else "--attention-backend",
        "decode": "--decode-attention-backend" if s.decode_attention_backend else "--attention-backend",
    }
    out: list[Finding] = []
    done: set[str] = set()
    for phase, be in (("prefill", prefill), ("decode", decode)):
        if be in done:
            continue
        done.add(be)
        out += backend_vs_gpu(
            be,
            gpu,
            target,
            role=f"target {phase} backend",
            kv_cache_dtype=s.kv_cache_dtype,
            flag=flags[phase],
        )
    return out


def _hybrid_on_blackwell(
    gpu: GpuFacts, target: ModelFacts | None, prefill: str, decode: str
) -> list[Finding]:
    """layers/attention/attention_registry.py: hybrid GDN models on Blackwell."""
    if target is None or not target.is_hybrid or gpu.capability[0] not in (10, 11, 12):
        return []
    allowed = ["triton", "trtllm_mha", "flashinfer"] + (["fa4"] if gpu.capability[0] != 12 else [])
    if all(b in allowed for b in (prefill, decode)):
        return []
    msg = (
        f"Only {set(allowed)} backends are supported on Blackwell GPUs for hybrid GDN models. "
        f"Got prefill={prefill}, decode={decode}."
    )
    return [
        _f(
            CHECK,
            ERROR,
            f"target on {gpu.name}: '{msg}'",
            "--attention-backend flashinfer",
            fix_flags={"attention-backend": "flashinfer"},
            source="srt/layers/attention/attention_registry.py",
        )
    ]


def _draft_backend(
    s: LaunchSettings, gpu: GpuFacts, target_decode: str, draft: ModelFacts | None
) -> list[Finding]:
    """speculative_hook.py: _resolve_dflash_draft_attention_backend (unset: the target's backend)."""
    be = s.draft_attention_backend or target_decode
    flag = "--speculative-draft-attention-backend"
    if be not in DRAFT_ATTENTION_BACKENDS:
        given = s.draft_attention_backend is not None  # argparse takes any string here
        return [
            _f(
                CHECK,
                ERROR if given else WARN,
                (
                    f"{flag} {be!r} is not in SGLang's DRAFT_ATTENTION_BACKEND_CHOICES "
                    f"({', '.join(DRAFT_ATTENTION_BACKENDS)}); its parser accepts any string, then DFLASH "
                    "runs flashinfer instead (other algorithms: 'Invalid attention backend')"
                    if given
                    else f"DFLASH draft backend {be!r} (the target's) is not one of "
                    f"{', '.join(DRAFT_ATTENTION_BACKENDS)}: SGLang falls back to flashinfer"
                ),
                f"{flag} flashinfer",
                fix_flags={flag[2:]: "flashinfer"},
            )
        ]
    if be == "trtllm_mha":
        return [
            _f(
                CHECK,
                WARN,
                "DFLASH only runs the draft on trtllm_mha when every draft "
                "layer is sliding-window or the draft is causal; otherwise SGLang falls back to "
                "flashinfer (fa4 on SM100)",
                f"{flag} flashinfer",
            )
        ]
    return backend_vs_gpu(be, gpu, draft, role="DFLASH draft backend", flag=flag)
