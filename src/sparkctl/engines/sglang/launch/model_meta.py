"""What the memory planner needs to know about a model: its config.json and weight bytes.

Weight bytes come from safetensors headers only (8-byte little-endian length + JSON header:
each tensor's dtype, shape and data offsets). Tensor data is never read, so planning a 16 GB
checkpoint reads a few hundred kilobytes.

Models are found in a Hugging Face cache (`<hf_cache>/hub/models--<org>--<name>/snapshots/<rev>/`)
or in any directory holding config.json (+ *.safetensors), which is how offline planning works
when the weights are not on this machine.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkctl.engines.sglang.launch.archs import (
    DEFAULT_VISION_CONFIG,
    MM_DISABLED_BY_DEFAULT,
    MULTIMODAL_ARCHS,
)
from sparkctl.engines.support.models import find_model_dir
from sparkctl.errors import UsageError

# Bytes per element of the safetensors dtypes (F4/F6 packs are stored as U8 in practice).
SAFETENSORS_DTYPE_BYTES: dict[str, float] = {
    "F64": 8,
    "I64": 8,
    "U64": 8,
    "F32": 4,
    "I32": 4,
    "U32": 4,
    "F16": 2,
    "BF16": 2,
    "I16": 2,
    "U16": 2,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "F8_E8M0": 1,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
    "F4": 0.5,
}
TORCH_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "half": 2, "float": 4}
# The keys SGLang reads a context length from, first match wins
# (srt/utils/hf_transformers/common.py: CONTEXT_LENGTH_KEYS / get_context_length).
CONTEXT_LENGTH_KEYS = (
    "max_sequence_length",
    "seq_length",
    "max_seq_len",
    "model_max_length",
    "max_position_embeddings",
)
MAX_HEADER_BYTES = 100 * 1024 * 1024  # the safetensors format's own limit


@dataclass(frozen=True)
class LinearAttention:
    """Gated-DeltaNet (Qwen3-Next / Qwen3.5) linear-attention geometry (srt/configs/qwen3_next.py)."""

    num_k_heads: int
    num_v_heads: int
    k_head_dim: int
    v_head_dim: int
    conv_kernel: int


@dataclass(frozen=True)
class ModelFacts:
    name: str
    architectures: list[str]
    num_layers: int
    full_attention_layers: int  # layers that own a KV cache
    linear_layers: int  # layers that own a recurrent (mamba/GDN) state instead
    num_kv_heads: int
    head_dim: int
    v_head_dim: int
    dtype: str  # compute dtype (config torch_dtype/dtype)
    derived_context_len: int
    max_position_embeddings: int | None
    rope_scaling: dict[str, Any] | None
    linear: LinearAttention | None = None
    num_attention_heads: int = 0
    is_multimodal: bool = False  # SGLang's model_config.is_multimodal with default flags
    vision_layers: int = 24  # vision_config.num_hidden_layers (SGLang's default 24 when absent)
    vision_hidden: int | None = None  # vision_config.hidden_size; None: no vision_config
    mamba_ssm_dtype: str | None = None  # from config; SGLang's default is float32
    kv_cache_quant_fp8: bool = False  # checkpoint asks for an FP8 KV cache when kv dtype is auto
    is_mla: bool = False
    quant_method: str | None = None
    dflash_block_size: int | None = None  # DFLASH drafts: block size from their config
    weight_bytes: int | None = None  # all safetensors tensors, unsharded
    weight_files: int = 0
    source: str = ""  # where the facts came from (path)
    notes: list[str] = field(default_factory=list)

    @property
    def is_hybrid(self) -> bool:
        return self.linear is not None and self.linear_layers > 0

    @property
    def dtype_bytes(self) -> int:
        return TORCH_DTYPE_BYTES.get(self.dtype, 2)


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    text = config.get("text_config")
    return text if isinstance(text, dict) else config


def rope_config(text: dict[str, Any]) -> dict[str, Any] | None:
    """rope_parameters before rope_scaling (srt/configs/model_config.py:667; qwen3_5.py:24
    copies rope_parameters into rope_scaling when the latter is unset)."""
    rope = text.get("rope_parameters") or text.get("rope_scaling") or None
    return rope if isinstance(rope, dict) else None


ROPE_KEYS = ("rope_parameters", "rope_scaling")  # transformers >= 5 / < 5


def rope_dicts(config: dict[str, Any]) -> list[dict[str, Any]]:
    """Every rope configuration in every shape transformers has used: `rope_scaling` (< 5) or
    `rope_parameters` (>= 5), at the top level or under `text_config`, and transformers 5's
    per-layer-type form (`rope_parameters: {full_attention: {...}, sliding_attention: {...}}`)."""
    out: list[dict[str, Any]] = []
    for level in (config, config.get("text_config")):
        if not isinstance(level, dict):
            continue
        for key in ROPE_KEYS:
            rope = level.get(key)
            if not isinstance(rope, dict):
                continue
            nested = [v for v in rope.values() if isinstance(v, dict)]
            out += nested if nested and not any(k in rope for k in ("rope_type", "type")) else [rope]
    return out


def rope_type(rope: dict[str, Any]) -> str:
    return str(rope.get("rope_type", rope.get("type", "")) or "").lower()


def yarn_rope(config: dict[str, Any]) -> dict[str, Any] | None:
    """The first YaRN rope configuration of a config (or a --json-model-override-args document)."""
    return next((r for r in rope_dicts(config) if rope_type(r) == "yarn"), None)


def derived_context_length(text: dict[str, Any]) -> int:
    """srt/utils/hf_transformers/common.py:677 get_context_length: the first context key, times
    the rope scaling factor (1 with original_max_position_embeddings or llama3 rope)."""
    rope = rope_config(text)
    factor = 1.0
    if isinstance(rope, dict):
        factor = float(rope.get("factor", 1) or 1)
        if "original_max_position_embeddings" in rope or rope.get("rope_type") == "llama3":
            factor = 1.0
    for key in CONTEXT_LENGTH_KEYS:
        if text.get(key) is not None:
            return int(factor * int(text[key]))
    return 2048


def _layer_split(text: dict[str, Any], num_layers: int) -> tuple[int, int]:
    """(full-attention layers, linear-attention layers).

    SGLang 0.5.23 derives Qwen3-Next/3.5 layer kinds from `full_attention_interval` (every
    interval-th layer is full attention) and only falls back to the HF `layer_types` list.
    """
    interval = text.get("full_attention_interval")
    if isinstance(interval, int) and interval > 0:
        full = sum(1 for i in range(num_layers) if (i + 1) % interval == 0)
        return full, num_layers - full
    types = text.get("layer_types")
    if isinstance(types, list) and types:
        full = sum(1 for t in types if t in ("full_attention", "attention", "sliding_attention"))
        linear = sum(1 for t in types if t in ("linear_attention", "mamba"))
        return full, linear
    return num_layers, 0


def multimodal_default(config: dict[str, Any], archs: list[str]) -> bool:
    """srt/configs/model_config.py:820 is_multimodal with SGLang's default flags: a multimodal
    architecture (:2522), multimodal not disabled by default for it (:692), and the checkpoint
    not declaring language_model_only (:674). --enable-multimodal / --language-model-only are
    applied by the planner from the flags."""
    if not archs or config.get("language_model_only"):
        return False
    return any(a in MULTIMODAL_ARCHS for a in archs) and archs[0] not in MM_DISABLED_BY_DEFAULT


def facts_from_config(
    config: dict[str, Any],
    *,
    name: str = "",
    weight_bytes: int | None = None,
    weight_files: int = 0,
    source: str = "",
) -> ModelFacts:
    """Pure: a config.json dict (+ weight bytes) -> ModelFacts."""
    text = _text_config(config)
    archs = list(config.get("architectures") or text.get("architectures") or [])
    num_layers = int(text.get("num_hidden_layers") or 0)
    if num_layers <= 0:
        raise UsageError(f"{name or source}: config.json has no num_hidden_layers")
    heads = int(text.get("num_attention_heads") or 1)
    head_dim = int(text.get("head_dim") or (int(text.get("hidden_size", 0)) // heads))
    v_head_dim = int(text.get("v_head_dim") or head_dim)
    kv_heads = int(text.get("num_key_value_heads") or heads)
    linear = None
    full, lin = num_layers, 0
    if "linear_num_value_heads" in text or "linear_num_key_heads" in text:
        linear = LinearAttention(
            num_k_heads=int(text.get("linear_num_key_heads", 16)),
            num_v_heads=int(text.get("linear_num_value_heads", 32)),
            k_head_dim=int(text.get("linear_key_head_dim", 128)),
            v_head_dim=int(text.get("linear_value_head_dim", 128)),
            conv_kernel=int(text.get("linear_conv_kernel_dim", 4)),
        )
        full, lin = _layer_split(text, num_layers)
    quant = config.get("quantization_config") or text.get("quantization_config") or {}
    dflash = config.get("dflash_config") or {}
    block = dflash.get("block_size", config.get("block_size"))
    rope = rope_config(text)
    notes = []
    vision = config.get("vision_config")
    if not isinstance(vision, dict):
        vision = next((DEFAULT_VISION_CONFIG[a] for a in archs if a in DEFAULT_VISION_CONFIG), None)
    if not linear and any(k in text for k in ("mamba_d_state", "ssm_state_size", "mamba_num_heads")):
        notes.append("hybrid mamba layout other than Gated DeltaNet: state size not modelled")
    return ModelFacts(
        name=name,
        architectures=archs,
        num_layers=num_layers,
        full_attention_layers=full,
        linear_layers=lin,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        v_head_dim=v_head_dim,
        dtype=str(text.get("torch_dtype") or text.get("dtype") or config.get("torch_dtype") or "bfloat16"),
        derived_context_len=derived_context_length(text),
        max_position_embeddings=text.get("max_position_embeddings"),
        rope_scaling=rope,
        linear=linear,
        num_attention_heads=heads,
        is_multimodal=multimodal_default(config, archs),
        vision_layers=int(vision.get("num_hidden_layers", 24)) if vision is not None else 24,
        vision_hidden=int(vision.get("hidden_size", 1024)) if vision is not None else None,
        mamba_ssm_dtype=text.get("mamba_ssm_dtype"),
        kv_cache_quant_fp8=str(quant.get("kv_cache_quant_algo") or "").upper() == "FP8",
        is_mla="kv_lora_rank" in text,
        quant_method=quant.get("quant_method"),
        dflash_block_size=int(block) if block is not None else None,
        weight_bytes=weight_bytes,
        weight_files=weight_files,
        source=source,
        notes=notes,
    )


def read_safetensors_header(path: Path) -> dict[str, Any]:
    """The JSON header of one .safetensors file (reads 8 + header-length bytes, no tensor data)."""
    try:
        with path.open("rb") as fh:
            raw = fh.read(8)
            if len(raw) != 8:
                raise UsageError(f"{path}: not a safetensors file (shorter than 8 bytes)")
            (length,) = struct.unpack("<Q", raw)
            if length <= 0 or length > MAX_HEADER_BYTES:
                raise UsageError(f"{path}: not a safetensors file (header length {length})")
            body = fh.read(length)
    except OSError as exc:  # e.g. a snapshot link whose blob never finished downloading
        raise UsageError(
            f"{path}: cannot read ({exc.strerror or exc})",
            fix="finish the download (`huggingface-cli download ...`) or `sparkctl ship --weights`",
        ) from None
    if len(body) != length:
        raise UsageError(f"{path}: truncated safetensors header")
    try:
        return json.loads(body)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: safetensors header is not JSON ({exc})") from None


def tensor_bytes(header: dict[str, Any]) -> int:
    """Bytes of all tensors a header describes (from data offsets; shapes x dtype as fallback)."""
    total = 0
    for name, meta in header.items():
        if name == "__metadata__" or not isinstance(meta, dict):
            continue
        offsets = meta.get("data_offsets")
        if isinstance(offsets, list) and len(offsets) == 2:
            total += int(offsets[1]) - int(offsets[0])
            continue
        count = 1
        for dim in meta.get("shape", []):
            count *= int(dim)
        total += int(count * SAFETENSORS_DTYPE_BYTES.get(meta.get("dtype", ""), 2))
    return total


def weight_bytes_in(directory: Path) -> tuple[int, int]:
    """(bytes, files) over every *.safetensors in a model directory (headers only)."""
    files = sorted(directory.glob("*.safetensors"))
    return sum(tensor_bytes(read_safetensors_header(f)) for f in files), len(files)


def load_model_facts(directory: Path, name: str = "") -> ModelFacts:
    config_path = directory / "config.json"
    if not config_path.is_file():
        raise UsageError(f"{directory}: no config.json", fix="point at a model snapshot directory")
    try:
        config = json.loads(config_path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(
            f"{config_path}: cannot read the model config ({exc})", fix="re-download the model's config.json"
        ) from None
    wbytes, nfiles = weight_bytes_in(directory)
    return facts_from_config(
        config,
        name=name or directory.name,
        weight_bytes=wbytes or None,
        weight_files=nfiles,
        source=str(directory),
    )


def find_model_facts(repo_id: str, revision: str | None, search: list[Path]) -> ModelFacts | None:
    """Look for a model in each of `search` (HF caches or plain model directories)."""
    found = find_model_dir(repo_id, revision, search)
    return load_model_facts(found, repo_id) if found is not None else None
