"""vLLM's memory model (engines/vllm/memory.py): a launch that fits with less than fit's headroom
to spare is a warn, so the shipped profiles' `fit` passes with margin, not just at the edge."""

from __future__ import annotations

from pathlib import Path

from sparkctl.engines.vllm.check import memory_findings
from sparkctl.facts.gpu import Gpu, GpuReport
from sparkctl.findings import Severity
from sparkctl.planning.build import build_plan
from sparkctl.profile import load_profile_file
from sparkctl.profile.schema import Profile

ROOT = Path(__file__).resolve().parents[4]
GIB = 1 << 30
QWEN_32B = {"num_hidden_layers": 64, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128}


def box(args: dict) -> Profile:
    data = load_profile_file(ROOT / "profiles" / "vllm-two-gpu-box.yaml").model_dump(
        mode="json", exclude_none=True
    )
    data["engine"]["args"].update(args)
    return Profile.model_validate(data)


def report(free_gib: float) -> GpuReport:
    gpus = tuple(
        Gpu(
            i, "RTX 3090", memory_total_mib=24 * 1024, memory_free_mib=int(free_gib * 1024), compute_cap="8.6"
        )
        for i in range(2)
    )
    return GpuReport(gpus=gpus, source="nvidia-smi")


def findings(prof: Profile, free_gib: float, weights_gib: float) -> list:
    return memory_findings(
        build_plan(prof, "tp2"),
        prof,
        {"box": report(free_gib)},
        model_bytes=int(weights_gib * GIB),
        config=QWEN_32B,
    )


def test_a_roomy_launch_is_ok() -> None:
    assert [f.severity for f in findings(box({}), 23.5, 9)] == [Severity.OK]


def test_less_than_the_headroom_free_at_start_is_a_warn_with_the_fraction_that_keeps_it() -> None:
    [f] = findings(box({}), 22.0, 9)  # 21.6 GiB asked of 22.0 free
    assert f.severity == Severity.WARN
    assert f.message == (
        "--gpu-memory-utilization 0.9 asks 21.60 GiB with 22.00 GiB free: under the 1024 MiB headroom fit keeps"
    )
    assert f.fix.startswith("--gpu-memory-utilization 0.87 (1 GiB stays free")


def test_kv_that_just_fits_one_sequence_is_a_warn() -> None:
    # 16384 tokens x 128 KiB = 2 GiB of KV; 21.6 - 19 weights per GPU leaves 2.6: 0.6 GiB spare
    [f] = findings(box({}), 23.5, 38)
    assert f.severity == Severity.WARN
    assert "leaves 0.60 GiB after the weights and one --max-model-len sequence's KV" in f.message
