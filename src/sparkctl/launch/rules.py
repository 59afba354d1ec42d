"""Launch rules keyed by SGLang version and GPU compute capability: each returns Findings.

Every rule cites the SGLang 0.5.23 file it mirrors (docs/launch-safety.md lists them all). A
finding whose fix can be applied mechanically carries it as `data["fix_flags"]`, so the combined
fix can be re-checked by the very same rules.
"""

from __future__ import annotations

import json

from sparkctl.findings import Finding, Severity
from sparkctl.launch.inputs import GB10_MAX_MEM_FRACTION, HUMAN_INT_FLAGS, GpuFacts, LaunchSettings, bad_value
from sparkctl.launch.memory_terms import resolved_strategy
from sparkctl.launch.model_meta import ModelFacts

ERROR, WARN, OK = Severity.ERROR, Severity.WARN, Severity.OK
# srt/arg_groups/choices.py: DRAFT_ATTENTION_BACKEND_CHOICES
DRAFT_ATTENTION_BACKENDS = ("flashinfer", "fa3", "fa4", "triton", "ascend", "trtllm_mha", "intel_xpu")
DFLASH_MAX_CONTEXT = 262144
FA3_ERROR = (
    "FlashAttention v3 Backend requires SM>=80 and SM<=90. Please use `--attention-backend flashinfer`."
)


def _f(check: str, sev: Severity, msg: str, fix: str | None = None, **data) -> Finding:
    return Finding(check=check, severity=sev, message=msg, fix=fix, data=data)


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
    major, minor = gpu.capability
    cc = f"{major}.{minor}"
    head = model.head_dim if model else None
    mla = bool(model and model.is_mla)
    check = "AttentionBackendArch"
    fix = f"{flag} flashinfer"
    fix_flags = {flag.lstrip("-"): "flashinfer"}
    out: list[Finding] = []
    if backend == "fa3":
        # layers/attention/attention_registry.py: create_flashattention_v3_backend
        if not ((major == 8 and not mla) or major == 9):
            out.append(
                _f(
                    check,
                    ERROR,
                    f"{role}: fa3 on {gpu.name} (sm{major}{minor}): SGLang asserts '{FA3_ERROR}'",
                    fix,
                    fix_flags=fix_flags,
                    source="srt/layers/attention/attention_registry.py",
                )
            )
        elif major == 8 and minor != 0 and head and head > 128:
            out.append(
                _f(
                    check,
                    WARN,
                    f"{role}: fa3 on sm{major}{minor} with head_dim {head}: the sm86/sm89 "
                    "shared memory is too small for large head dims (kernels/ops/attention/flash_attention_v3.py)",
                    fix,
                    fix_flags=fix_flags,
                )
            )
    elif backend == "fa4":
        # kernels/ops/attention/flash_attn/cute/interface.py (_flash_attn_fwd, _validate_head_dims)
        src = "srt/kernels/ops/attention/flash_attn/cute/interface.py"
        if major < 8:
            out.append(
                _f(
                    check,
                    ERROR,
                    f"{role}: fa4 on compute capability {cc}: 'Unsupported compute "
                    "capability. Supported: 8.x, 9.x, 10.x, 11.x'",
                    fix,
                    fix_flags=fix_flags,
                    source=src,
                )
            )
        elif major == 8:
            out.append(
                _f(
                    check,
                    ERROR,
                    f"{role}: fa4 on {gpu.name} (sm{major}{minor}): SGLang's KV cache is "
                    "paged and FA4's SM8x path asserts 'paged KV not supported on SM 8.0' at the first "
                    "forward, after the weights have loaded; FA3/FA4 do not serve consumer Ampere/Ada cards",
                    fix,
                    fix_flags=fix_flags,
                    source=src,
                )
            )
        elif major == 9 and head and head > 256 and head != 512:
            out.append(
                _f(
                    check,
                    ERROR,
                    f"{role}: fa4 on SM90 supports head_dim 8..256 (or 512), model has {head}",
                    fix,
                    fix_flags=fix_flags,
                    source=src,
                )
            )
        elif major in (10, 11) and head and not (head <= 128 or head in (192, 256) or (mla and head == 512)):
            out.append(
                _f(
                    check,
                    ERROR,
                    f"{role}: fa4 on SM100/SM110 supports head_dim <= 128, 192/128 or "
                    f"256/256; model has {head}",
                    fix,
                    fix_flags=fix_flags,
                    source=src,
                )
            )
        elif major == 10 and not mla:
            out.append(
                _f(
                    check,
                    WARN,
                    f"{role}: fa4 on SM100 forces --page-size 128 "
                    "(srt/arg_groups/overrides.py: _fa4_page_constraint)",
                )
            )
    elif backend == "trtllm_mha":
        # srt/arg_groups/attention_hook.py: handle_attention_backend_compatibility
        if major not in (9, 10, 12):
            msg = (
                "TRTLLM MHA backend for prefill requires Hopper (SM90), Blackwell (SM100), or SM120 GPUs. "
                "Please use a different prefill backend."
            )
            out.append(
                _f(
                    check,
                    ERROR,
                    f"{role}: trtllm_mha on {gpu.name} (sm{major}{minor}): '{msg}'",
                    fix,
                    fix_flags=fix_flags,
                    source="srt/arg_groups/attention_hook.py",
                )
            )
        elif major == 12 and kv_cache_dtype == "fp8_e4m3" and role.startswith("target"):
            out.append(
                _f(
                    check,
                    ERROR,
                    f"{role}: 'TRTLLM FMHAv2 prefill on SM120 does not support fp8_e4m3 "
                    "KV cache or skip-softmax.'",
                    fix,
                    fix_flags=fix_flags,
                    source="srt/arg_groups/attention_hook.py",
                )
            )
    return out


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
        flags = {
            "prefill": "--prefill-attention-backend"
            if s.prefill_attention_backend
            else "--attention-backend",
            "decode": "--decode-attention-backend" if s.decode_attention_backend else "--attention-backend",
        }
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
        if s.attention_backend == "fa3" and s.kv_cache_dtype == "fp8_e5m2":
            out.append(
                _f(
                    "AttentionBackendArch",
                    WARN,
                    "fa3 only reads fp8_e4m3 KV; SGLang switches the "
                    "attention backend to triton (srt/arg_groups/overrides.py: _attention_backend_fa3_fp8_fallback)",
                    "--kv-cache-dtype fp8_e4m3",
                )
            )
        # layers/attention/attention_registry.py: hybrid GDN models on Blackwell
        if target is not None and target.is_hybrid and gpu.capability[0] in (10, 11, 12):
            allowed = ["triton", "trtllm_mha", "flashinfer"] + (["fa4"] if gpu.capability[0] != 12 else [])
            bad = [b for b in (prefill, decode) if b not in allowed]
            if bad:
                msg = (
                    f"Only {set(allowed)} backends are supported on Blackwell GPUs for hybrid GDN models. "
                    f"Got prefill={prefill}, decode={decode}."
                )
                out.append(
                    _f(
                        "AttentionBackendArch",
                        ERROR,
                        f"target on {gpu.name}: '{msg}'",
                        "--attention-backend flashinfer",
                        fix_flags={"attention-backend": "flashinfer"},
                        source="srt/layers/attention/attention_registry.py",
                    )
                )
        if s.is_dflash:
            out += _draft_backend(s, gpu, decode, draft)
    return out


def _draft_backend(
    s: LaunchSettings, gpu: GpuFacts, target_decode: str, draft: ModelFacts | None
) -> list[Finding]:
    """speculative_hook.py: _resolve_dflash_draft_attention_backend (unset: the target's backend)."""
    be = s.draft_attention_backend or target_decode
    flag = "--speculative-draft-attention-backend"
    if be not in DRAFT_ATTENTION_BACKENDS:
        return [
            _f(
                "AttentionBackendArch",
                WARN,
                f"DFLASH draft backend {be!r} is not one of "
                f"{', '.join(DRAFT_ATTENTION_BACKENDS)}: SGLang falls back to flashinfer",
                f"{flag} flashinfer",
                fix_flags={flag[2:]: "flashinfer"},
            )
        ]
    if be == "trtllm_mha":
        return [
            _f(
                "AttentionBackendArch",
                WARN,
                "DFLASH only runs the draft on trtllm_mha when every draft "
                "layer is sliding-window or the draft is causal; otherwise SGLang falls back to "
                "flashinfer (fa4 on SM100)",
                f"{flag} flashinfer",
            )
        ]
    return backend_vs_gpu(be, gpu, draft, role="DFLASH draft backend", flag=flag)


def check_dflash(
    s: LaunchSettings, target: ModelFacts | None, draft: ModelFacts | None, ruleset: str = "0.5.23"
) -> list[Finding]:
    """speculative_hook.py: _handle_dflash; mamba_hook.py: validate_mamba_extra_buffer."""
    if not s.is_dflash:
        return []
    out: list[Finding] = []
    src = "srt/arg_groups/speculative_hook.py"
    if s.draft_model_path is None:
        out.append(
            _f(
                "DflashDraftPath",
                ERROR,
                "DFLASH speculative decoding requires setting --speculative-draft-model-path.",
                "set model.draft in the profile",
                source=src,
            )
        )
    if s.pp != 1:
        out.append(
            _f(
                "DflashPipeline",
                ERROR,
                "Currently DFLASH speculative decoding only supports pp_size == 1.",
                "drop --pp-size",
                fix_flags={"pp-size": None, "pp": None},
                source=src,
            )
        )
    d = s.num_draft_tokens
    if s.dflash_block_size is not None:
        if s.dflash_block_size <= 0:
            out.append(
                _f(
                    "DflashBlockSize",
                    ERROR,
                    "DFLASH requires --speculative-dflash-block-size to be "
                    f"positive, got {s.dflash_block_size}.",
                    source=src,
                )
            )
        elif d is not None and d != s.dflash_block_size:
            out.append(
                _f(
                    "DflashBlockSize",
                    ERROR,
                    (
                        "Both --speculative-num-draft-tokens and --speculative-dflash-block-size are set but they "
                        f"differ. For DFLASH they must match. speculative_num_draft_tokens={d}, "
                        f"speculative_dflash_block_size={s.dflash_block_size}."
                    ),
                    f"--speculative-dflash-block-size {d}",
                    fix_flags={"speculative-dflash-block-size": str(d)},
                    source=src,
                )
            )
        d = s.dflash_block_size
    d = s.draft_tokens(draft.dflash_block_size if draft else None)
    if s.draft_window_size is not None and s.draft_window_size < d:
        out.append(
            _f(
                "DflashDraftWindow",
                ERROR,
                (
                    "--speculative-draft-window-size must be >= --speculative-num-draft-tokens (block_size). "
                    f"window_size={s.draft_window_size}, block_size={d}."
                ),
                f"--speculative-draft-window-size {d}",
                fix_flags={"speculative-draft-window-size": str(d)},
                source=src,
            )
        )
    extra_buffer = (  # resolved exactly as the memory planner resolves it (arch, release, overlap)
        target is not None
        and target.is_hybrid
        and not s.disable_radix_cache
        and resolved_strategy(s, target, ruleset).startswith("extra_buffer")
    )
    if extra_buffer:
        msrc = "srt/arg_groups/mamba_hook.py"
        if s.mamba_track_interval < d:
            out.append(
                _f(
                    "MambaTrackInterval",
                    ERROR,
                    (
                        f"mamba extra_buffer: --mamba-track-interval {s.mamba_track_interval} is smaller than "
                        f"{d} draft tokens: SGLang fails 'assert view.mamba_track_interval >= "
                        "view.speculative_num_draft_tokens' (an AssertionError without a message)"
                    ),
                    "--mamba-track-interval 256",
                    fix_flags={"mamba-track-interval": "256"},
                    source=msrc,
                )
            )
        page = s.page_size or 1
        if s.mamba_track_interval % page:
            out.append(
                _f(
                    "MambaTrackInterval",
                    ERROR,
                    (
                        f"mamba extra_buffer: --mamba-track-interval {s.mamba_track_interval} is not a multiple "
                        f"of --page-size {page} ('assert view.mamba_track_interval % view.page_size == 0')"
                    ),
                    source=msrc,
                )
            )
    if s.stream_interval != 1:
        out.append(
            _f(
                "StreamInterval",
                WARN,
                (
                    "DFLASH without --stream-interval 1 packs 2-4 accepted tokens into one SSE event: clients "
                    "that count chunks report about 4x too low tok/s"
                ),
                "--stream-interval 1",
                fix_flags={"stream-interval": "1"},
            )
        )
    return out


def check_context(
    s: LaunchSettings, target: ModelFacts | None, draft: ModelFacts | None, env: dict[str, str]
) -> list[Finding]:
    """YaRN / long context with DFLASH (recipe: the draft config inherits max_position_embeddings
    and fails at boot) and configs/model_config.py: _derive_context_length."""
    out: list[Finding] = []
    ctx = s.context_length
    allow = env.get("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "") not in ("", "0", "false", "False")
    yarn = False
    if s.json_model_override_args:
        try:
            override = json.loads(s.json_model_override_args)
        except json.JSONDecodeError:
            override = {}
        rope = override.get("rope_scaling") or (override.get("text_config") or {}).get("rope_scaling") or {}
        yarn = isinstance(rope, dict) and str(rope.get("rope_type", rope.get("type", ""))).lower() == "yarn"
    if s.is_dflash and (yarn or (ctx or 0) > DFLASH_MAX_CONTEXT):
        why = "YaRN rope scaling" if yarn else f"--context-length {ctx} (> {DFLASH_MAX_CONTEXT})"
        out.append(
            _f(
                "YarnWithDflash",
                ERROR,
                (
                    f"{why} with DFLASH: the context extension leaks into the draft model's config and the "
                    "server dies at boot (AttributeError ... max_position_embeddings)"
                ),
                f"--context-length {DFLASH_MAX_CONTEXT} and no YaRN override",
                fix_flags={"context-length": str(DFLASH_MAX_CONTEXT), "json-model-override-args": None},
            )
        )
    if ctx and target is not None and ctx > target.derived_context_len and not allow and not yarn:
        out.append(
            _f(
                "ContextLength",
                ERROR,
                (
                    f"Warning: User-specified context_length ({ctx}) is greater than the derived context_length "
                    f"({target.derived_context_len}). ... To allow overriding this maximum, set the env var "
                    "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"
                ),
                f"--context-length {target.derived_context_len}",
                fix_flags={"context-length": str(target.derived_context_len)},
            )
        )
    return out


def check_mem_fraction(s: LaunchSettings, gpus: list[GpuFacts]) -> list[Finding]:
    if any(g.is_gb10 for g in gpus) and (s.mem_fraction_static or 0) > GB10_MAX_MEM_FRACTION:
        return [
            _f(
                "MemFractionGB10",
                ERROR,
                (
                    f"--mem-fraction-static {s.mem_fraction_static} on GB10: above {GB10_MAX_MEM_FRACTION} the unified "
                    "memory runs out during 'Capture target verify CUDA graph' and the whole machine hard-reboots"
                ),
                f"--mem-fraction-static {GB10_MAX_MEM_FRACTION}",
                fix_flags={"mem-fraction-static": f"{GB10_MAX_MEM_FRACTION:.2f}"},
            )
        ]
    return []


def check_tp(s: LaunchSettings, gpus_per_node: dict[str, int]) -> list[Finding]:
    """tp x pp ranks spread evenly over the mode's nodes (validation_hook.py:179), each node
    needing that many GPUs."""
    nnodes = max(len(gpus_per_node), 1)
    world = s.tp * s.pp
    if world % nnodes:
        return [
            _f(
                "TpVsGpus",
                ERROR,
                f"tp={s.tp} x pp={s.pp} does not split evenly over {nnodes} node(s): "
                "SGLang asserts 'tp_size must be divisible by number of nodes'",
                f"use a tp x pp that is a multiple of {nnodes}",
                source="srt/arg_groups/validation_hook.py:179",
            )
        ]
    per_node = world // nnodes
    short = {n: g for n, g in gpus_per_node.items() if g < per_node}
    if short:
        where = ", ".join(f"{n} has {g}" for n, g in short.items())
        return [
            _f(
                "TpVsGpus",
                ERROR,
                f"tp={s.tp} needs {per_node} GPU(s) per node; {where}",
                f"set tp to {min(gpus_per_node.values()) * nnodes} or add GPUs",
            )
        ]
    idle = {n: g - per_node for n, g in gpus_per_node.items() if g > per_node}
    if idle:
        where = ", ".join(f"{n}: {k}" for n, k in idle.items())
        return [_f("TpVsGpus", WARN, f"tp={s.tp} leaves GPUs idle ({where})")]
    return []


def check_sleep_on_idle(s: LaunchSettings) -> list[Finding]:
    if s.sleep_on_idle:
        return []
    return [
        _f(
            "SleepOnIdle",
            WARN,
            "without --sleep-on-idle the SGLang scheduler busy-spins ~97 % of a CPU core while idle",
            "--sleep-on-idle",
            fix_flags={"sleep-on-idle": True},
        )
    ]


def check_version(s: LaunchSettings, ruleset: str) -> list[Finding]:
    """A flag renamed between the modelled releases (kept even when the parser check is skipped)."""
    out: list[Finding] = []
    if ruleset == "0.5.23" and "mamba-scheduler-strategy" in s.flags:
        out.append(
            _f(
                "FlagRenamed",
                ERROR,
                "--mamba-scheduler-strategy was renamed --mamba-radix-cache-strategy (SGLang 0.5.23)",
                "--mamba-radix-cache-strategy " + s.mamba_strategy,
                fix_flags={"mamba-scheduler-strategy": None, "mamba-radix-cache-strategy": s.mamba_strategy},
            )
        )
    if ruleset == "0.5.12" and "mamba-radix-cache-strategy" in s.flags:
        out.append(
            _f(
                "FlagRenamed",
                ERROR,
                "--mamba-radix-cache-strategy does not exist before SGLang 0.5.16; "
                "0.5.12 and older call it --mamba-scheduler-strategy",
                "--mamba-scheduler-strategy " + s.mamba_strategy,
                fix_flags={"mamba-radix-cache-strategy": None, "mamba-scheduler-strategy": s.mamba_strategy},
            )
        )
    return out


def check_heads(s: LaunchSettings, model: ModelFacts | None, role: str = "target") -> list[Finding]:
    """Attention heads must split over tp (linear.py:1139 divide; qwen3_5.py:1293); KV heads must
    split too, or, when fewer than tp, tp must be a multiple of them (each head is replicated,
    linear.py:1140-1144, qwen3_5.py:1296-1299). Keyed on config.json; skipped with DP attention."""
    if model is None or s.tp <= 1 or s.flags.get("enable-dp-attention") is True:
        return []
    tp, heads, kv = s.tp, model.num_attention_heads, model.num_kv_heads
    src = "srt/layers/linear.py:1139-1144"
    out: list[Finding] = []
    ok_tps = [
        t for t in range(1, 65) if (not heads or heads % t == 0) and (kv % t == 0 if kv >= t else t % kv == 0)
    ]
    fix = f"a tp that divides the heads: one of {', '.join(map(str, ok_tps[:8]))}"
    if heads and heads % tp:
        out.append(
            _f(
                "TpVsHeads",
                ERROR,
                f"{role} {model.name}: {heads} attention heads do not split over tp={tp} "
                f"(SGLang asserts '{heads} is not divisible by {tp}' while building the model)",
                fix,
                source=src,
            )
        )
    if kv >= tp and kv % tp:
        out.append(
            _f(
                "TpVsHeads",
                ERROR,
                f"{role} {model.name}: {kv} KV heads do not split over tp={tp} "
                f"('{kv} is not divisible by {tp}')",
                fix,
                source=src,
            )
        )
    elif kv < tp and tp % kv:
        out.append(
            _f(
                "TpVsHeads",
                ERROR,
                f"{role} {model.name}: tp={tp} is not a multiple of its {kv} KV heads, "
                f"so they cannot be replicated evenly ('{tp} is not divisible by {kv}')",
                fix,
                source=src,
            )
        )
    return out


# Numeric flags the checks read, with the type SGLang's parser converts them with.
NUMERIC_FLAGS: dict[str, type] = {
    "tp-size": int,
    "tp": int,
    "tensor-parallel-size": int,
    "pp-size": int,
    "pp": int,
    "nnodes": int,
    "mem-fraction-static": float,
    "context-length": int,
    "max-prefill-tokens": int,
    "max-running-requests": int,
    "max-total-tokens": int,
    "chunked-prefill-size": int,
    "page-size": int,
    "max-mamba-cache-size": int,
    "mamba-full-memory-ratio": float,
    "mamba-track-interval": int,
    "speculative-num-draft-tokens": int,
    "speculative-dflash-block-size": int,
    "speculative-draft-window-size": int,
    "stream-interval": int,
}


def check_values(s: LaunchSettings) -> list[Finding]:
    """Values SGLang's parser would reject (run when the parser itself could not run)."""
    out: list[Finding] = []
    for name, kind in NUMERIC_FLAGS.items():
        bad = bad_value(s.flags, name, kind)
        if bad is not None:
            what = (
                "an integer (or 32k / 512Ki)"
                if name in HUMAN_INT_FLAGS
                else f"{'an integer' if kind is int else 'a number'}"
            )
            out.append(
                _f(
                    "FlagsValid",
                    ERROR,
                    f"--{name} {bad!r} is not {what}: SGLang's parser exits with "
                    f"'invalid {kind.__name__} value'",
                    f"give --{name} a number",
                    flag=f"--{name}",
                    value=bad,
                )
            )
    return out
