"""Version- and GPU-keyed launch rules, and the two-GPU-box case end to end (profile -> plan -> checks)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from sparkctl.engines.sglang.launch import rules, rules_attention, rules_dflash
from sparkctl.engines.sglang.launch.check import LaunchContext, accepted, check_launch, context_for
from sparkctl.engines.sglang.launch.inputs import (
    GpuFacts,
    LaunchSettings,
    read_flags,
    server_flags,
    with_flags,
)
from sparkctl.engines.sglang.launch.model_meta import facts_from_config, load_model_facts
from sparkctl.findings import Severity
from sparkctl.planning.build import build_plan
from sparkctl.profile import load_profile_text

MODELS = Path(__file__).parents[4] / "fixtures" / "models"
GPTQ = load_model_facts(MODELS / "qwen3.6-27b-gptq-int4")
NVFP4 = load_model_facts(MODELS / "qwen3.6-27b-nvfp4")
DRAFT = load_model_facts(MODELS / "qwen3.6-27b-dflash")
RTX3090 = GpuFacts("NVIDIA GeForce RTX 3090", 24576, (8, 6))
GB10 = GpuFacts("NVIDIA GB10", 131072, (12, 1), unified=True)
H100 = GpuFacts("NVIDIA H100", 81559, (9, 0))
BASE = ["python3", "-m", "sglang.launch_server", "--model-path", "m"]


def s_(*flags: str) -> LaunchSettings:
    return LaunchSettings.from_argv([*BASE, *flags])


def checks(findings, sev=Severity.ERROR) -> list[str]:
    return [f.check for f in findings if f.severity == sev]


def test_argv_helpers() -> None:
    argv = [*BASE, "--tp", "2", "--sleep-on-idle", "--x=3", "--lst", "a", "b"]
    assert server_flags(argv)[:2] == ["--model-path", "m"]
    assert read_flags(server_flags(argv)) == {
        "model-path": "m",
        "tp": "2",
        "sleep-on-idle": True,
        "x": "3",
        "lst": ["a", "b"],
    }
    out = with_flags(argv, {"tp": "4", "sleep-on-idle": None, "new": True})
    assert read_flags(server_flags(out)) == {
        "model-path": "m",
        "x": "3",
        "lst": ["a", "b"],
        "tp": "4",
        "new": True,
    }


def test_fa4_and_fa3_by_compute_capability() -> None:
    fa4_86 = rules_attention.backend_vs_gpu("fa4", RTX3090, GPTQ, role="draft")
    assert fa4_86[0].severity == Severity.ERROR and "paged KV not supported on SM 8.0" in fa4_86[0].message
    assert (
        rules_attention.backend_vs_gpu("fa4", H100, GPTQ, role="t") == []
    )  # head_dim 256 is within SM90's range
    assert rules_attention.backend_vs_gpu("fa4", GB10, GPTQ, role="t") == []  # separate SM120 module
    fa3_gb10 = rules_attention.backend_vs_gpu("fa3", GB10, GPTQ, role="t")
    assert fa3_gb10[0].severity == Severity.ERROR and rules_attention.FA3_ERROR in fa3_gb10[0].message
    assert rules_attention.backend_vs_gpu("fa3", H100, GPTQ, role="t") == []
    assert (
        rules_attention.backend_vs_gpu("fa3", RTX3090, GPTQ, role="t")[0].severity == Severity.WARN
    )  # hd 256 on sm86
    trt = rules_attention.backend_vs_gpu("trtllm_mha", RTX3090, GPTQ, role="target prefill")
    assert "TRTLLM MHA backend for prefill requires Hopper" in trt[0].message
    fp8 = rules_attention.backend_vs_gpu(
        "trtllm_mha", GB10, GPTQ, role="target prefill", kv_cache_dtype="fp8_e4m3"
    )
    assert "does not support fp8_e4m3" in fp8[0].message
    assert rules_attention.backend_vs_gpu("flashinfer", RTX3090, GPTQ, role="t") == []


def test_hybrid_gdn_on_gb10_rejects_fa4_target() -> None:
    out = rules_attention.check_attention(s_("--attention-backend", "fa4"), [GB10], NVFP4, None)
    assert any("hybrid GDN" in f.message for f in out if f.severity == Severity.ERROR)
    assert (
        checks(rules_attention.check_attention(s_("--attention-backend", "flashinfer"), [GB10], NVFP4, None))
        == []
    )


def test_draft_backend_defaults_to_target_and_falls_back() -> None:
    dflash = ("--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "d")
    # target fa3 on sm86 is allowed (non-MLA), the draft inherits it
    out = rules_attention.check_attention(s_("--attention-backend", "fa4", *dflash), [RTX3090], GPTQ, DRAFT)
    assert len([f for f in out if f.severity == Severity.ERROR]) == 2  # target and draft
    odd = rules_attention.check_attention(
        s_(*dflash, "--speculative-draft-attention-backend", "torch_native"), [H100], GPTQ, DRAFT
    )
    assert any(f.severity == Severity.ERROR and "runs flashinfer instead" in f.message for f in odd)
    inherited = rules_attention.check_attention(
        s_(*dflash, "--attention-backend", "torch_native"), [H100], GPTQ, DRAFT
    )
    assert any(f.severity == Severity.WARN and "falls back to flashinfer" in f.message for f in inherited)


def test_dflash_constraints() -> None:
    base = ("--speculative-algorithm", "DFLASH", "--stream-interval", "1")
    assert checks(rules_dflash.check_dflash(s_(*base), GPTQ, DRAFT)) == ["DflashDraftPath"]
    d = (*base, "--speculative-draft-model-path", "d")
    assert checks(rules_dflash.check_dflash(s_(*d, "--pp-size", "2"), GPTQ, DRAFT)) == ["DflashPipeline"]
    mismatch = rules_dflash.check_dflash(
        s_(*d, "--speculative-num-draft-tokens", "8", "--speculative-dflash-block-size", "16"), GPTQ, DRAFT
    )
    assert checks(mismatch) == ["DflashBlockSize"] and "For DFLASH they must match" in mismatch[0].message
    window = rules_dflash.check_dflash(
        s_(*d, "--speculative-draft-window-size", "8"), GPTQ, DRAFT
    )  # block 16 from config
    assert checks(window) == ["DflashDraftWindow"]
    track = rules_dflash.check_dflash(
        s_(*d, "--speculative-num-draft-tokens", "8", "--mamba-track-interval", "4"), GPTQ, DRAFT
    )
    assert checks(track) == ["MambaTrackInterval"]
    paged = rules_dflash.check_dflash(
        s_(*d, "--page-size", "64", "--mamba-track-interval", "100"), GPTQ, DRAFT
    )
    assert checks(paged) == ["MambaTrackInterval"]
    assert checks(rules_dflash.check_dflash(s_(*d), GPTQ, DRAFT)) == []
    # 0.5.12 and older resolve mamba 'auto' to no_buffer (as the memory planner does): no
    # extra_buffer, so the track-interval assert cannot fire there.
    old = rules_dflash.check_dflash(
        s_(*d, "--speculative-num-draft-tokens", "8", "--mamba-track-interval", "4"), GPTQ, DRAFT, "0.5.12"
    )
    assert checks(old) == []
    no_stream = rules_dflash.check_dflash(
        s_("--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "d"), GPTQ, DRAFT
    )
    assert checks(no_stream, Severity.WARN) == ["StreamInterval"]


def test_yarn_and_long_context_with_dflash() -> None:
    d = ("--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "d")
    long = rules.check_context(s_(*d, "--context-length", "524288"), GPTQ, DRAFT, {})
    assert "YarnWithDflash" in checks(long)
    yarn = '{"text_config": {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}}'
    out = rules.check_context(s_(*d, "--json-model-override-args", yarn), GPTQ, DRAFT, {})
    assert checks(out) == ["YarnWithDflash"]
    assert checks(rules.check_context(s_(*d, "--context-length", "262144"), GPTQ, DRAFT, {})) == []
    # without DFLASH, beyond the model's derived length: SGLang's own ValueError unless allowed
    assert checks(rules.check_context(s_("--context-length", "300000"), GPTQ, None, {})) == ["ContextLength"]
    allowed = {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}
    assert checks(rules.check_context(s_("--context-length", "300000"), GPTQ, None, allowed)) == []


YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 262144, "rope_theta": 1e7}
YARN_SHAPES = {
    "rope_scaling, top level (transformers < 5)": {"rope_scaling": YARN},
    "rope_scaling, old 'type' key": {"rope_scaling": {"type": "yarn", "factor": 4.0}},
    "rope_scaling under text_config": {"text_config": {"rope_scaling": YARN}},
    "rope_parameters, top level (transformers 5)": {"rope_parameters": YARN},
    "rope_parameters under text_config (transformers 5, Qwen3.5)": {"text_config": {"rope_parameters": YARN}},
    "rope_parameters per layer type under text_config": {
        "text_config": {
            "rope_parameters": {"full_attention": YARN, "sliding_attention": {"rope_type": "default"}}
        }
    },
}


@pytest.mark.parametrize("shape", YARN_SHAPES, ids=list(YARN_SHAPES))
def test_yarn_in_every_rope_shape_transformers_used_is_refused_with_dflash(shape: str) -> None:
    import json

    d = ("--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "d")
    doc = YARN_SHAPES[shape]
    out = rules.check_context(s_(*d, "--json-model-override-args", json.dumps(doc)), GPTQ, DRAFT, {})
    assert checks(out) == ["YarnWithDflash"], shape
    assert "--json-model-override-args" in out[0].message
    # the same YaRN in the model's own config.json (no override) is refused too, without a flag fix
    nested = "text_config" in doc  # Qwen3.5's nested config, else Llama's flat one
    cfg = json.loads(
        (MODELS / ("qwen3.6-27b-gptq-int4" if nested else "llama-3.1-8b") / "config.json").read_text()
    )
    level = cfg["text_config"] if nested else cfg
    for key in ("rope_parameters", "rope_scaling"):
        level.pop(key, None)
    level.update(doc["text_config"] if nested else doc)
    target = facts_from_config(cfg, name="yarn-model")
    own = rules.check_context(s_(*d), target, DRAFT, {})
    assert checks(own) == ["YarnWithDflash"] and "yarn-model config.json" in own[0].message, shape
    assert not own[0].data.get("fix_flags")


def test_a_default_rope_in_every_shape_is_not_yarn() -> None:
    import json

    d = ("--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "d")
    plain = {"text_config": {"rope_parameters": {"rope_type": "default", "rope_theta": 1e7}}}
    assert (
        checks(rules.check_context(s_(*d, "--json-model-override-args", json.dumps(plain)), GPTQ, DRAFT, {}))
        == []
    )
    assert checks(rules.check_context(s_(*d), GPTQ, DRAFT, {})) == []


def test_a_draft_backend_outside_sglangs_registry_is_an_error_when_given() -> None:
    d = ("--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "d")
    ctx = LaunchContext([RTX3090, RTX3090], {"box": 2}, GPTQ, DRAFT, sglang_version="0.5.23")
    bad = check_launch([*BASE, *d, "--speculative-draft-attention-backend", "flashinfor"], ctx)
    err = [f for f in bad.errors if f.check == "AttentionBackendArch"]
    assert err and "DRAFT_ATTENTION_BACKEND_CHOICES" in err[0].message and "flashinfor" in err[0].message
    assert bad.fix.get("speculative-draft-attention-backend") == "flashinfer"


def test_tp_is_checked_per_replica_group_and_idle_gpus_per_box() -> None:
    """dp2 on two boxes: each replica is tp=1 on ONE node, not tp=1 over two nodes."""
    two = {"spark1": 1, "spark2": 1}
    assert rules.check_tp(s_("--tp", "1"), two, group_nnodes=1) == []
    # quad tp2x2: groups of 2 nodes, tp=2
    quad = {f"spark{i}": 1 for i in range(1, 5)}
    assert rules.check_tp(s_("--tp", "2"), quad, group_nnodes=2) == []
    assert rules.check_tp(s_("--tp", "1"), quad, group_nnodes=1) == []
    # the same tp=2 over one group of 4 nodes does not split
    assert checks(rules.check_tp(s_("--tp", "2"), quad)) == ["TpVsGpus"]
    # one box, two GPUs, two tp=1 replicas: no idle GPU; one replica leaves one idle
    box = {"box": 2}
    assert rules.check_tp(s_("--tp", "1"), box, group_nnodes=1, slots_per_node={"box": 2}) == []
    idle = rules.check_tp(s_("--tp", "1"), box, group_nnodes=1, slots_per_node={"box": 1})
    assert checks(idle, Severity.WARN) == ["TpVsGpus"] and "box: 1" in idle[0].message
    # two tp=2 replicas on a two-GPU box need 4: an error naming the box and both counts
    short = rules.check_tp(s_("--tp", "2"), box, group_nnodes=1, slots_per_node={"box": 2})
    assert checks(short) == ["TpVsGpus"] and "box has 2 for 4" in short[0].message


def test_gb10_mem_fraction_tp_sleep_and_rename() -> None:
    assert checks(rules.check_mem_fraction(s_("--mem-fraction-static", "0.95"), [GB10])) == [
        "MemFractionGB10"
    ]
    assert rules.check_mem_fraction(s_("--mem-fraction-static", "0.90"), [GB10]) == []
    assert rules.check_mem_fraction(s_("--mem-fraction-static", "0.95"), [H100]) == []
    assert checks(rules.check_tp(s_("--tp", "4"), {"a": 1, "b": 1})) == ["TpVsGpus"]
    assert checks(rules.check_tp(s_("--tp", "3"), {"a": 2, "b": 2})) == ["TpVsGpus"]
    assert checks(rules.check_tp(s_("--tp", "1"), {"box": 2}), Severity.WARN) == ["TpVsGpus"]
    assert rules.check_tp(s_("--tp", "2"), {"a": 1, "b": 1}) == []
    assert checks(rules.check_sleep_on_idle(s_()), Severity.WARN) == ["SleepOnIdle"]
    renamed = rules.check_version(s_("--mamba-scheduler-strategy", "extra_buffer"), "0.5.23")
    assert renamed[0].fix == "--mamba-radix-cache-strategy extra_buffer"
    assert checks(rules.check_version(s_("--mamba-radix-cache-strategy", "no_buffer"), "0.5.12")) == [
        "FlagRenamed"
    ]


TWO_GPU_BOX = """
cluster: twogpu
nodes:
  - name: box
    address: local
    gpus: 2
    gpu: {name: NVIDIA GeForce RTX 3090, memory_gib: 24, compute_capability: "8.6"}
image: {ref: "lmsysorg/sglang:v0.5.23"}
model:
  target: {id: Qwen/Qwen3.6-27B-GPTQ-Int4}
  draft: {id: z-lab/Qwen3.6-27B-DFlash}
engine:
  sglang_version: "%s"
  args:
    speculative-draft-attention-backend: fa4
    mem-fraction-static: 0.8
modes:
  tp2: {nodes: [box], tp: 2}
"""


def _two_gpu_case(version: str):
    profile = load_profile_text(TWO_GPU_BOX % version)
    plan = build_plan(profile, "tp2")
    ctx = context_for(plan, profile, target=GPTQ, draft=DRAFT)
    argv = plan.ranks[0].argv
    return argv, ctx, check_launch(argv, ctx)


def test_two_rtx3090_rejected_with_fa4_error_and_memory_verdict_then_fix_accepted() -> None:
    """Issue #11: 27B GPTQ hybrid + DFlash draft, fa4 draft backend, 0.8 on two 24 GB cards."""
    for version in ("0.5.23", "0.5.12"):
        argv, ctx, result = _two_gpu_case(version)
        errors = {f.check: f for f in result.errors}
        assert "paged KV not supported on SM 8.0" in errors["AttentionBackendArch"].message
        assert result.memory is not None
        assert any(
            f.check == "MemoryFit" and f.severity in (Severity.OK, Severity.WARN, Severity.ERROR)
            for f in result.findings
        )
        assert not accepted(argv, ctx)
        fixed = with_flags(argv, result.fix)
        assert result.fix["speculative-draft-attention-backend"] == "flashinfer"
        assert accepted(fixed, ctx), (version, result.fix)
        assert check_launch(fixed, ctx).errors == []
    # On the older release the memory verdict is the error the user saw, and every fix is re-checked.
    argv, ctx, result = _two_gpu_case("0.5.12")
    mem = next(f for f in result.findings if f.check == "MemoryFit")
    assert mem.severity == Severity.ERROR
    assert "Not enough memory. Please try to increase --mem-fraction-static." in mem.message
    assert result.memory_fixes
    base = with_flags(argv, {"speculative-draft-attention-backend": "flashinfer"})
    for fix in result.memory_fixes:
        assert accepted(with_flags(base, fix.changes), ctx), fix.changes
        assert fix.plan.fits


def test_shipped_two_gpu_profile_settings_fit() -> None:
    profile = load_profile_text((Path(__file__).parents[5] / "profiles" / "two-gpu-box.yaml").read_text())
    plan = build_plan(profile, "tp2")
    ctx = context_for(plan, profile, target=GPTQ, draft=DRAFT)
    assert accepted(plan.ranks[0].argv, ctx)


def test_mem_fraction_fix_is_smallest_that_fits() -> None:
    ctx = LaunchContext(
        gpus=[H100],
        gpus_per_node={"n": 1},
        target=load_model_facts(MODELS / "llama-3.1-8b"),
        sglang_version="0.5.23",
    )
    argv = [*BASE, "--mem-fraction-static", "0.15", "--sleep-on-idle"]
    result = check_launch(argv, ctx)
    assert result.memory is not None and not result.memory.fits
    fix = next(f for f in result.memory_fixes if "mem-fraction-static" in f.changes)
    m = float(fix.changes["mem-fraction-static"])
    assert accepted(with_flags(argv, fix.changes), ctx)
    assert not accepted(with_flags(argv, {"mem-fraction-static": f"{m - 0.01:.2f}"}), ctx)
    gb10_ctx = replace(ctx, gpus=[GB10])
    gb10 = check_launch([*BASE, "--mem-fraction-static", "0.1", "--sleep-on-idle"], gb10_ctx)
    assert all(float(f.changes.get("mem-fraction-static", 0)) <= 0.90 for f in gb10.memory_fixes)


def test_a_mem_fraction_outside_0_1_is_an_error_on_any_gpu() -> None:
    """`mem-fraction-static: 1.5` passed even plan --check (SGLang's parser takes any float)."""
    for value in ("1.5", "0", "-0.2"):
        assert checks(rules.check_mem_fraction(s_("--mem-fraction-static", value), [H100])) == ["MemFraction"]
    assert rules.check_mem_fraction(s_("--mem-fraction-static", "0.8"), [H100]) == []
