"""The memory planner against values worked out by hand from SGLang's formulas (see memory.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from sparkctl.engines.sglang.launch.inputs import GpuFacts, LaunchSettings
from sparkctl.engines.sglang.launch.memory import (
    ERR_KV,
    ERR_MAMBA,
    ERR_WEIGHTS,
    MemoryInputs,
    default_mem_fraction,
    plan_memory,
)
from sparkctl.engines.sglang.launch.memory_terms import MIB, mamba_per_req, ruleset_for
from sparkctl.engines.sglang.launch.model_meta import load_model_facts

MODELS = Path(__file__).parents[4] / "fixtures" / "models"
GPTQ = load_model_facts(MODELS / "qwen3.6-27b-gptq-int4")
NVFP4 = load_model_facts(MODELS / "qwen3.6-27b-nvfp4")
DRAFT = load_model_facts(MODELS / "qwen3.6-27b-dflash")
LLAMA = load_model_facts(MODELS / "llama-3.1-8b")
RTX3090 = GpuFacts("NVIDIA GeForce RTX 3090", 24576, (8, 6))
H100 = GpuFacts("NVIDIA H100 80GB HBM3", 81559, (9, 0), available_mib=80000)
GB10 = GpuFacts("NVIDIA GB10", 131072, (12, 1), unified=True, available_mib=120000)


def settings(*flags: str) -> LaunchSettings:
    return LaunchSettings.from_argv(["python3", "-m", "sglang.launch_server", "--model-path", "m", *flags])


def test_fixture_weights_are_header_sums() -> None:
    # GPTQ 27B: 5.09 GB bf16 embed + lm_head, the rest int4 + fp16 scales (make_fixtures.py).
    assert GPTQ.weight_bytes == 17_787_321_856
    assert DRAFT.weight_bytes == 2_820_771_840
    assert (GPTQ.full_attention_layers, GPTQ.linear_layers) == (16, 48)


def test_plain_attention_discrete_no_spec() -> None:
    s = settings("--tp", "1", "--mem-fraction-static", "0.85", "--context-length", "8192")
    plan = plan_memory(MemoryInputs(s, H100, LLAMA, sglang_version="0.5.23"))
    P = 80000 * MIB
    A = P - 16_060_522_496
    rest = A - P * (1 - 0.85)
    cell = 8 * (128 + 128) * 32 * 2  # kv heads x (K+V head dim) x layers x bf16 = 131072 B/token
    assert plan.kv_cell_bytes == cell == 131072
    assert plan.rest_after_load == pytest.approx(rest)
    assert plan.kv_tokens == int(rest) // cell
    # resolve_max_num_reqs: clamp(tokens / context * 512, 2048, 4096), then at most tokens // 2
    est = max(min(int(plan.kv_tokens / 8192 * 512), 4096), 2048)
    assert plan.max_running_requests == min(est, plan.kv_tokens // 2)
    assert plan.fits and plan.mamba is None


def test_plain_attention_tp2_fp8_kv() -> None:
    s = settings("--tp", "2", "--mem-fraction-static", "0.8", "--kv-cache-dtype", "fp8_e4m3")
    plan = plan_memory(MemoryInputs(s, H100, LLAMA, sglang_version="0.5.23"))
    assert plan.kv_cell_bytes == 4 * 256 * 32 * 1  # 8 kv heads / tp 2, one byte each
    assert plan.target_weights_per_rank == pytest.approx(16_060_522_496 / 2)


def test_mamba_state_per_request_matches_mamba2_state_shape() -> None:
    # conv: (Hv*dv + 2*Hk*dk)/tp * (kernel-1) bf16; ssm: Hv/tp * dv * dk * 4 (float32 default)
    per_layer_tp2 = (6144 + 2 * 16 * 128) // 2 * 3 * 2 + (48 // 2) * 128 * 128 * 4
    assert mamba_per_req(GPTQ, 2, None) == 48 * per_layer_tp2 == 76_972_032
    per_layer_bf16 = 10240 * 3 * 2 + 48 * 128 * 128 * 2
    assert mamba_per_req(NVFP4, 1, "bfloat16") == 48 * per_layer_bf16 == 78_446_592


def test_hybrid_dflash_discrete_auto_mamba() -> None:
    """The two-RTX-3090 launch (fa4 draft, 0.8) under 0.5.23: draft tokens 16 from the draft
    config, max running requests 48 (DFLASH default), strategy auto -> extra_buffer (ratio 5)."""
    s = settings(
        "--tp",
        "2",
        "--mem-fraction-static",
        "0.8",
        "--speculative-algorithm",
        "DFLASH",
        "--speculative-draft-model-path",
        "d",
        "--speculative-draft-attention-backend",
        "fa4",
    )
    plan = plan_memory(MemoryInputs(s, RTX3090, GPTQ, DRAFT, "0.5.23"))
    P = (24576 - 512) * MIB
    A = P - GPTQ.weight_bytes / 2 - DRAFT.weight_bytes / 2
    rest = A - P * 0.2 - 100 * MIB  # multimodal arch: SGLANG_VLM_CACHE_SIZE_MB reserved
    per_req, D, ratio = 76_972_032, 16, 5
    budget = rest * 0.9 / 1.9
    K = int((budget - per_req * (1 + D)) // (per_req * (1 + D / ratio)))
    inter = per_req * (min(48, K // ratio) + 1) * D
    kv_budget = rest - inter - (K + 1) * per_req
    assert plan.mamba is not None
    assert (
        (plan.mamba.slots, plan.mamba.ratio, plan.mamba.strategy)
        == (K, 5, "extra_buffer")
        == (10, 5, "extra_buffer")
    )
    assert plan.mamba.intermediate_bytes == pytest.approx(inter)
    assert plan.kv_budget == pytest.approx(kv_budget)
    # target: 4/2 kv heads x 512 x 16 full layers x bf16; draft: 8/2 x 256 x 4 layers x bf16 (fa4 draft)
    assert (plan.kv_cell_bytes, plan.kv_cell_draft_bytes) == (32768 + 8192, 8192)
    assert plan.kv_tokens == int(kv_budget) // 40960
    assert plan.max_running_requests == min(48, plan.kv_tokens // 2, K // ratio) == 2
    assert plan.fits


def test_hybrid_dflash_unified_explicit_mamba_cache() -> None:
    """GB10 recipe: --max-mamba-cache-size 64, 8 draft tokens, 16 requests, fp8 KV, MemAvailable."""
    s = settings(
        "--mem-fraction-static",
        "0.90",
        "--kv-cache-dtype",
        "fp8_e4m3",
        "--mamba-ssm-dtype",
        "bfloat16",
        "--mamba-full-memory-ratio",
        "4.21",
        "--mamba-radix-cache-strategy",
        "extra_buffer",
        "--max-mamba-cache-size",
        "64",
        "--max-running-requests",
        "16",
        "--context-length",
        "262144",
        "--speculative-algorithm",
        "DFLASH",
        "--speculative-draft-model-path",
        "d",
        "--speculative-num-draft-tokens",
        "8",
        "--attention-backend",
        "flashinfer",
    )
    plan = plan_memory(MemoryInputs(s, GB10, NVFP4, DRAFT, "0.5.23"))
    P = 120000 * MIB  # unified: psutil MemAvailable, probed
    rest = P - NVFP4.weight_bytes - DRAFT.weight_bytes - P * 0.1 - 100 * MIB
    per_req = 78_446_592
    inter = per_req * (min(16, 64 // 5) + 1) * 8
    kv_budget = rest - inter - 65 * per_req
    assert plan.mamba.slots == 64 and plan.mamba.intermediate_bytes == inter
    assert plan.kv_budget == pytest.approx(kv_budget)
    assert plan.kv_cell_bytes == 4 * 512 * 16 + 8 * 256 * 4  # fp8 target + fp8 flashinfer draft
    assert plan.max_running_requests == 12  # 64 slots // 5 per request
    assert any("reduced to 12" in w for w in plan.warnings)
    assert plan.fits


def test_unified_memory_without_probe_assumes_os_reserve() -> None:
    gpu = GpuFacts("NVIDIA GB10", 131072, (12, 1), unified=True)
    plan = plan_memory(
        MemoryInputs(settings("--mem-fraction-static", "0.9"), gpu, LLAMA, sglang_version="0.5.23")
    )
    assert plan.free_before_load == (131072 - 8192) * MIB
    assert plan.free_source.startswith("assumed MemAvailable")


def test_weights_leave_nothing_reports_sglang_error_and_minimum() -> None:
    small = GpuFacts("NVIDIA RTX 4500", 24576, (8, 9), available_mib=17000)
    plan = plan_memory(
        MemoryInputs(settings("--mem-fraction-static", "0.9"), small, LLAMA, sglang_version="0.5.23")
    )
    assert plan.error_check == ERR_WEIGHTS and not plan.fits
    P = 17000 * MIB
    minimum = 1 - (P - LLAMA.weight_bytes) / P
    assert plan.error.startswith(
        "Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.9."
    )
    assert f"above {math.ceil(minimum * 1000) / 1000:.3f}" in plan.error


def test_mamba_budget_too_small_error() -> None:
    s = settings(
        "--tp",
        "2",
        "--mem-fraction-static",
        "0.5",
        "--speculative-algorithm",
        "DFLASH",
        "--speculative-draft-model-path",
        "d",
    )
    plan = plan_memory(MemoryInputs(s, RTX3090, GPTQ, DRAFT, "0.5.23"))
    assert plan.error_check == ERR_MAMBA
    assert plan.error.startswith("Not enough GPU memory for hybrid (mamba/linear-attention) state cache.")


def test_old_release_spec_scratch_kills_the_launch() -> None:
    """<= 0.5.12 reserved per_req x max_running_requests x draft tokens: 77 MB x 48 x 16 = 59 GB."""
    s = settings(
        "--tp",
        "2",
        "--mem-fraction-static",
        "0.8",
        "--speculative-algorithm",
        "DFLASH",
        "--speculative-draft-model-path",
        "d",
    )
    plan = plan_memory(MemoryInputs(s, RTX3090, GPTQ, DRAFT, "0.5.12"))
    assert plan.ruleset == "0.5.12"
    assert plan.mamba.intermediate_bytes == 76_972_032 * 48 * 16
    assert plan.error_check == ERR_KV
    assert plan.error == "Not enough memory. Please try to increase --mem-fraction-static."


def test_default_mem_fraction_3090_tp2_dflash() -> None:
    # 24 GiB: chunked 4096, decode max_bs 48 (capped by the DFLASH 48 requests), 50 prefill graph sizes
    reserved = 512 + 4096 * 1.5 + 2 / 8 * 1024 + 48 * 2 + 50 * 8
    s = settings("--tp", "2", "--speculative-algorithm", "DFLASH")
    assert default_mem_fraction(s, RTX3090) == round((24576 - reserved) / 24576, 3) == 0.699


def test_default_mem_fraction_large_gpu() -> None:
    s = settings("--disable-prefill-cuda-graph")
    # 128 GiB (< 160): chunked 8192, decode max_bs 256
    reserved = 512 + 8192 * 1.5 + 1 / 8 * 1024 + 256 * 2
    assert default_mem_fraction(s, GB10) == round((131072 - reserved) / 131072, 3) == 0.897
    # > 60 GiB: reserved is at least 10 GiB
    small = settings("--disable-prefill-cuda-graph", "--chunked-prefill-size", "2048")
    assert default_mem_fraction(small, GB10) == round((131072 - 10240) / 131072, 3)


def test_ruleset_selection() -> None:
    assert ruleset_for("0.5.23") == ("0.5.23", None)
    assert ruleset_for("v0.5.12.post1")[0] == "0.5.12"
    assert ruleset_for("0.5.9")[0] == "0.5.12"
    assert ruleset_for("0.5.20")[0] == "0.5.23" and ruleset_for("0.5.20")[1]
    assert ruleset_for(None)[1] == "SGLang version unknown: used the 0.5.23 rules"
