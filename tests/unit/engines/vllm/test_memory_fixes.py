"""vLLM memory errors in words (engines/vllm/memory_fixes.py): each fix says what it gives up, with
its number, and a more-GPUs layout is offered only where the node's GPUs and the heads allow it."""

from __future__ import annotations

from sparkctl.engines.vllm.check import memory_findings
from sparkctl.engines.vllm.memory_fixes import Budget, kv_fixes, weights_fixes
from sparkctl.facts.gpu import Gpu, GpuReport
from sparkctl.planning.build import build_plan
from tests.unit.engines.vllm.test_memory import GIB, QWEN_32B, box  # the one vLLM box profile


def report(free_gib: float = 23.5) -> GpuReport:
    gpus = tuple(
        Gpu(
            i, "RTX 3090", memory_total_mib=24 * 1024, memory_free_mib=int(free_gib * 1024), compute_cap="8.6"
        )
        for i in range(2)
    )
    return GpuReport(gpus=gpus, source="nvidia-smi")


def test_a_long_context_says_the_length_that_fits_fp8s_cost_and_the_fraction_it_needs() -> None:
    prof = box({"max-model-len": 131072})
    [f] = memory_findings(
        build_plan(prof, "tp2"), prof, {"box": report()}, model_bytes=30 * GIB, config=QWEN_32B
    )
    assert f.severity.value == "error"
    assert f.message == (
        "--max-model-len 131072: one sequence needs 16.00 GiB of KV cache, more than the 6.60 GiB "
        "--gpu-memory-utilization 0.9 leaves after the weights (15.00 GiB per GPU; before activations)"
    )
    fixes = f.fix.split("; or ")
    assert fixes[0] == "--max-model-len 49152: requests of at most 49152 tokens instead of 131072"
    assert fixes[1].startswith(
        "--kv-cache-dtype fp8 (sm89+): 8.00 GiB for one 131072-token sequence instead of 16.00 GiB (not enough alone)"
    )
    assert "minimal accuracy degradation" in fixes[1]
    assert len(fixes) == 2  # 15 + 17.6 GiB is more than 0.95 of a 24 GiB card: no fraction offered


def test_weights_too_big_offer_a_fraction_or_a_tp_the_box_holds_never_one_it_does_not() -> None:
    prof = box({"gpu-memory-utilization": 0.8})
    [solo] = memory_findings(
        build_plan(prof, "solo"), prof, {"box": report()}, model_bytes=20 * GIB, config=QWEN_32B
    )
    assert "share of the weights alone is 20.0 GiB" in solo.message
    raise_it, more = solo.fix.split("; or ")
    assert raise_it.startswith(
        "--gpu-memory-utilization 0.88: 2.88 GiB instead of 4.80 GiB left outside vLLM's share"
    )
    assert more.startswith(
        "a mode with tp: 2 on box (2 GPUs): 10.00 GiB of weights per GPU instead of 20.00 GiB"
    )
    [tp2] = memory_findings(
        build_plan(prof, "tp2"), prof, {"box": report()}, model_bytes=60 * GIB, config=QWEN_32B
    )
    assert tp2.fix == "a smaller (more quantized) model: these GPUs cannot hold this one's weights"


def test_a_tp_the_heads_do_not_divide_is_not_offered() -> None:
    b = Budget(total=24 * GIB, free=None, fraction=0.9, weights=30 * GIB, unified=False)
    fix = weights_fixes(b, 1, 4, "box", heads=27, kv_heads=3)  # 27 heads: neither 2 nor 4 divides them
    assert "tp: 3" in fix and "tp: 2" not in fix
    assert "tp:" not in weights_fixes(b, 1, 2, "box", heads=27, kv_heads=3)


def test_fp8_already_on_is_not_proposed_again_and_unified_memory_caps_the_fraction() -> None:
    b = Budget(total=119 * GIB, free=None, fraction=0.5, weights=20 * GIB, unified=True)
    fix = kv_fixes(b, per_token=64 * 1024, seq=1 << 20, fp8=True)
    assert "fp8" not in fix
    assert "--gpu-memory-utilization 0.76" in fix  # (20 + 64 x 1.1) / 119 GiB, under the GB10 cap
    assert "--gpu-memory-utilization" not in kv_fixes(b, per_token=128 * 1024, seq=1 << 20, fp8=True)
