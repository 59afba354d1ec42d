"""config.json + safetensors header reading, and finding models in a Hugging Face cache."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from sparkctl.engines.sglang.launch.model_meta import (
    derived_context_length,
    facts_from_config,
    find_model_facts,
    read_safetensors_header,
    tensor_bytes,
)
from sparkctl.errors import UsageError

MODELS = Path(__file__).parents[4] / "fixtures" / "models"


def _write_st(path: Path, tensors: dict, data: bytes = b"") -> None:
    body = json.dumps(tensors).encode()
    path.write_bytes(struct.pack("<Q", len(body)) + body + data)


def test_header_only_read_counts_offsets(tmp_path: Path) -> None:
    f = tmp_path / "m.safetensors"
    tensors = {
        "a": {"dtype": "BF16", "shape": [4, 8], "data_offsets": [0, 64]},
        "b": {"dtype": "F32", "shape": [2], "data_offsets": [64, 72]},
        "__metadata__": {"x": "y"},
    }
    _write_st(f, tensors, data=b"\0" * 72)
    assert tensor_bytes(read_safetensors_header(f)) == 72
    assert tensor_bytes({"c": {"dtype": "F8_E4M3", "shape": [10, 10]}}) == 100  # no offsets: shape x dtype


@pytest.mark.parametrize(
    "raw", [b"", b"\x01\x02", struct.pack("<Q", 0), struct.pack("<Q", 10) + b"{not json}"]
)
def test_bad_headers_are_usage_errors(tmp_path: Path, raw: bytes) -> None:
    f = tmp_path / "bad.safetensors"
    f.write_bytes(raw)
    with pytest.raises(UsageError):
        read_safetensors_header(f)


def test_context_length_follows_sglang() -> None:
    assert (
        derived_context_length(
            {"max_position_embeddings": 32768, "rope_scaling": {"type": "yarn", "factor": 4}}
        )
        == 131072
    )
    llama3 = {"max_position_embeddings": 131072, "rope_scaling": {"rope_type": "llama3", "factor": 8}}
    assert derived_context_length(llama3) == 131072
    assert derived_context_length({}) == 2048


def test_hybrid_layout_from_full_attention_interval() -> None:
    cfg = json.loads((MODELS / "qwen3.6-27b-gptq-int4" / "config.json").read_text())
    facts = facts_from_config(cfg)
    assert (facts.num_layers, facts.full_attention_layers, facts.linear_layers) == (64, 16, 48)
    assert facts.linear is not None and facts.linear.num_v_heads == 48
    assert (facts.num_kv_heads, facts.head_dim, facts.quant_method) == (4, 256, "gptq")


def test_find_model_in_hf_cache_by_branch_ref(tmp_path: Path) -> None:
    repo = tmp_path / "hub" / "models--z-lab--Qwen3.6-27B-DFlash"
    snap = repo / "snapshots" / "5b0d4b5aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
    shutil.copytree(MODELS / "qwen3.6-27b-dflash", snap)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(snap.name)
    facts = find_model_facts("z-lab/Qwen3.6-27B-DFlash", None, [tmp_path])
    assert facts is not None and facts.dflash_block_size == 16 and facts.weight_bytes == 2_820_771_840
    assert find_model_facts("org/missing", None, [tmp_path]) is None
