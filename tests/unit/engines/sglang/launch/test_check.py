"""Launch safety with margins, on the sparse safetensors fixtures: SGLang 0.5.23's multimodal
terms, weights that cannot load, probed memory, value syntax, head/node rules, and fixes that
are re-run through the same planner and leave room to serve."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from sparkctl.engines.sglang.launch import rules
from sparkctl.engines.sglang.launch.check import LaunchContext, check_launch, memory_plan
from sparkctl.engines.sglang.launch.fixes import MIN_DRAFT_TOKENS, Margin
from sparkctl.engines.sglang.launch.flags import FlagCheck, flag_findings
from sparkctl.engines.sglang.launch.inputs import GpuFacts, LaunchSettings, human_readable_int, with_flags
from sparkctl.engines.sglang.launch.mem_fraction import default_mem_fraction
from sparkctl.engines.sglang.launch.memory import ERR_MAMBA, ERR_WEIGHTS_TOO_BIG, MemoryInputs, plan_memory
from sparkctl.engines.sglang.launch.memory_terms import MIB
from sparkctl.engines.sglang.launch.model_meta import facts_from_config, load_model_facts
from sparkctl.engines.sglang.launch.pipeline import gpu_facts_from_report
from sparkctl.facts import gpu as probe
from sparkctl.findings import Severity
from sparkctl.profile.schema import GpuSpec as ProfileGpu

MODELS = Path(__file__).parents[4] / "fixtures" / "models"
GPU_FIX = Path(__file__).parents[4] / "fixtures" / "gpu"
GPTQ = load_model_facts(MODELS / "qwen3.6-27b-gptq-int4")
DRAFT = load_model_facts(MODELS / "qwen3.6-27b-dflash")
LLAMA = load_model_facts(MODELS / "llama-3.1-8b")
RTX3090 = GpuFacts("NVIDIA GeForce RTX 3090", 24576, (8, 6))
BASE = ["python3", "-m", "sglang.launch_server", "--model-path", "m", "--sleep-on-idle"]
DFLASH_2X24 = [
    *BASE,
    "--tp",
    "2",
    "--speculative-algorithm",
    "DFLASH",
    "--speculative-draft-model-path",
    "d",
    "--speculative-draft-attention-backend",
    "flashinfer",
    "--stream-interval",
    "1",
    "--mem-fraction-static",
    "0.8",
]


def s_(*flags: str) -> LaunchSettings:
    return LaunchSettings.from_argv([*BASE, *flags])


def ctx_2x3090(**kw) -> LaunchContext:
    return LaunchContext(
        gpus=[RTX3090, RTX3090],
        gpus_per_node={"box": 2},
        target=GPTQ,
        draft=DRAFT,
        sglang_version="0.5.23",
        **kw,
    )


# ------------------------------------------------------------------ SGLang 0.5.23 multimodal terms


def test_qwen35_is_multimodal_and_reserves_the_vlm_cache() -> None:
    assert GPTQ.is_multimodal and not LLAMA.is_multimodal
    assert GPTQ.vision_hidden == 1152 and GPTQ.vision_layers == 24  # Qwen3.5's default vision config
    plan = plan_memory(
        MemoryInputs(s_("--tp", "2", "--mem-fraction-static", "0.9"), RTX3090, GPTQ, None, "0.5.23")
    )
    assert plan.mm_reservation == 100 * MIB  # SGLANG_VLM_CACHE_SIZE_MB
    assert plan.rest_after_load == pytest.approx(plan.free_after_load - plan.static_slack - 100 * MIB)
    assert any(t.startswith("multimodal reservation 100 MiB") for t in plan.terms)
    text_only = plan_memory(
        MemoryInputs(
            s_("--tp", "2", "--mem-fraction-static", "0.9", "--language-model-only"),
            RTX3090,
            GPTQ,
            None,
            "0.5.23",
        )
    )
    assert text_only.mm_reservation == 0 and not any("multimodal" in t for t in text_only.terms)
    ipc = plan_memory(
        MemoryInputs(
            s_("--tp", "2", "--mem-fraction-static", "0.9", "--mm-feature-transport", "cuda_ipc"),
            RTX3090,
            GPTQ,
            None,
            "0.5.23",
            env={"SGLANG_VLM_CACHE_SIZE_MB": "200"},
        )
    )
    assert ipc.mm_reservation == (200 + 1024) * MIB  # + SGLANG_MM_FEATURE_CACHE_MB with a GPU transport
    old = plan_memory(
        MemoryInputs(s_("--tp", "2", "--mem-fraction-static", "0.9"), RTX3090, GPTQ, None, "0.5.12")
    )
    assert old.mm_reservation == 0  # not in the 0.5.12 rules


def test_vision_model_gets_the_lower_default_mem_fraction() -> None:
    s = s_("--tp", "2")
    plain = default_mem_fraction(s, RTX3090, False, LLAMA)
    vlm = default_mem_fraction(s, RTX3090, False, GPTQ)
    # 0.95 x (1 - 0.1 x (24 x 1152^2 / (24 x 1024^2) - 1)) = 0.95 x 0.9734375
    assert vlm == pytest.approx(plain * 0.95 * 0.9734375)
    assert default_mem_fraction(s_("--tp", "2", "--language-model-only"), RTX3090, False, GPTQ) == plain
    plan = plan_memory(MemoryInputs(s, RTX3090, GPTQ, None, "0.5.23"))
    assert plan.mem_fraction_source == "default" and plan.mem_fraction_static == pytest.approx(vlm)
    assert any(t.startswith("vision model: default mem fraction x 0.925") for t in plan.terms)


def test_weights_alone_exceeding_a_gpu_say_so_not_the_mamba_step() -> None:
    rtx4080 = GpuFacts("NVIDIA GeForce RTX 4080", 16376, (8, 9))
    plan = plan_memory(
        MemoryInputs(s_("--tp", "1", "--mem-fraction-static", "0.9"), rtx4080, GPTQ, None, "0.5.23")
    )
    assert plan.error_check == ERR_WEIGHTS_TOO_BIG != ERR_MAMBA
    assert plan.error.startswith("the weights do not fit: 16.57 GiB per rank (tp=1) against 15.49 GiB free")
    assert plan.mamba is None  # never reached the mamba step


# ------------------------------------------------------------------ probed memory


def test_probed_discrete_free_memory_is_used_and_named() -> None:
    rep = probe.report_from_smi((GPU_FIX / "h200/query-gpu.csv").read_text())
    gpus = gpu_facts_from_report(rep, "n1")
    assert [(g.available_mib, g.capability, g.probed_on) for g in gpus] == [(143156, (9, 0), "n1")] * 2
    plan = plan_memory(MemoryInputs(s_("--mem-fraction-static", "0.8"), gpus[0], LLAMA, None, "0.5.23"))
    assert plan.free_before_load == 143156 * MIB
    assert plan.free_source == "free GPU memory probed on n1: 143156 MiB"


def test_probed_memavailable_is_used_on_unified_memory() -> None:
    fields = ("index", "name", "memory.total", "memory.used", "memory.free")
    rep = probe.report_from_smi((GPU_FIX / "gb10/query-gpu.csv").read_text(), fields=fields)
    rep = rep.with_meminfo(probe.parse_meminfo((GPU_FIX / "gb10/meminfo.txt").read_text()))
    prof_gpu = ProfileGpu(name="NVIDIA GB10", memory_gib=128, compute_capability="12.1", unified_memory=True)
    (gpu,) = gpu_facts_from_report(rep, "spark1", prof_gpu)
    assert gpu.unified and gpu.available_mib == 118566368 // 1024 and gpu.memory_mib == 131072
    plan = plan_memory(MemoryInputs(s_("--mem-fraction-static", "0.9"), gpu, LLAMA, None, "0.5.23"))
    assert plan.free_source == f"MemAvailable probed on spark1: {118566368 // 1024} MiB"
    unprobed = plan_memory(
        MemoryInputs(s_("--mem-fraction-static", "0.9"), GpuFacts.from_profile(prof_gpu), LLAMA)
    )
    assert unprobed.free_source.startswith("assumed MemAvailable")


# ------------------------------------------------------------------ values as SGLang parses them


def test_context_length_suffixes_like_sglang() -> None:
    assert [human_readable_int(v) for v in ("32k", "512Ki", "25.6k", "1M", "2Mi", "4096")] == [
        32000,
        524288,
        25600,
        1_000_000,
        2 * 2**20,
        4096,
    ]
    for bad in ("1.5Ki", "32K", "32kb", "lots", ""):
        with pytest.raises(ValueError):
            human_readable_int(bad)
    assert s_("--context-length", "32k").context_length == 32000
    assert rules.check_values(s_("--context-length", "32k", "--max-prefill-tokens", "8Ki")) == []
    bad = rules.check_values(s_("--context-length", "32K", "--mem-fraction-static", "most"))
    assert {f.data["flag"] for f in bad} == {"--context-length", "--mem-fraction-static"}
    assert all(f.severity == Severity.ERROR for f in bad)


def test_rope_parameters_before_rope_scaling_and_text_config_nesting() -> None:
    text = {
        "num_hidden_layers": 2,
        "num_attention_heads": 8,
        "hidden_size": 1024,
        "max_position_embeddings": 32768,
        "rope_parameters": {"rope_type": "yarn", "factor": 4.0},
        "rope_scaling": {"rope_type": "yarn", "factor": 2.0},
    }
    nested = facts_from_config({"architectures": ["X"], "text_config": text})
    assert nested.derived_context_len == 131072  # rope_parameters' factor 4 wins over rope_scaling's 2
    assert nested.num_layers == 2 and nested.num_attention_heads == 8
    orig = {
        **text,
        "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192},
    }
    assert facts_from_config({"architectures": ["X"], "text_config": orig}).derived_context_len == 32768
    # The Qwen3.5 fixture declares rope_parameters without a factor: its 262144 stands, no warning.
    assert GPTQ.derived_context_len == 262144 and GPTQ.rope_scaling["rope_type"] == "default"


# ------------------------------------------------------------------ head and node divisibility


def test_tp_must_divide_attention_and_kv_heads_or_replicate_them() -> None:
    assert (GPTQ.num_attention_heads, GPTQ.num_kv_heads) == (24, 4)
    three = rules.check_heads(s_("--tp", "3"), GPTQ)  # 4 KV heads over 3: SGLang's divide() assert
    assert [f.check for f in three] == ["TpVsHeads"] and "4 KV heads do not split over tp=3" in three[
        0
    ].message
    assert rules.check_heads(s_("--tp", "2"), GPTQ) == []
    assert rules.check_heads(s_("--tp", "8"), GPTQ) == []  # 8 > 4 KV heads: each replicated twice
    sixteen = rules.check_heads(s_("--tp", "16"), GPTQ)
    assert any("24 attention heads do not split over tp=16" in f.message for f in sixteen)
    six = rules.check_heads(s_("--tp", "6"), GPTQ)
    assert any("tp=6 is not a multiple of its 4 KV heads" in f.message for f in six)
    assert six[0].fix.endswith("one of 1, 2, 4, 8, 12, 24")


def test_three_nodes_tp3_four_kv_heads_is_refused_before_loading() -> None:
    ctx = LaunchContext(
        gpus=[RTX3090] * 3, gpus_per_node={"a": 1, "b": 1, "c": 1}, target=GPTQ, sglang_version="0.5.23"
    )
    errors = check_launch([*BASE, "--tp", "3", "--nnodes", "3"], ctx).errors
    assert "TpVsHeads" in {f.check for f in errors}
    nodes = rules.check_tp(s_("--tp", "3"), {"a": 2, "b": 2})
    assert "tp_size must be divisible by number of nodes" in nodes[0].message


# ------------------------------------------------------------------ parser findings


def test_missing_parser_is_a_warning_naming_what_was_not_checked() -> None:
    (f,) = flag_findings(FlagCheck(method="skipped", problem="SGLang is not installed here"))
    assert f.severity == Severity.WARN and "NOT checked with SGLang's parser" in f.message
    ctx = ctx_2x3090()
    skipped = check_launch([*DFLASH_2X24, "--max-running-requests", "x"], ctx, FlagCheck(method="skipped"))
    assert any(e.check == "FlagsValid" and "'x' is not an integer" in e.message for e in skipped.errors)


def test_parser_version_mismatch_is_named_and_never_plain_ok() -> None:
    check = FlagCheck(method="local", sglang_version="0.5.23")
    out = flag_findings(check, expected={"the profile (engine.sglang_version)": "0.5.12"})
    assert [f.severity for f in out] == [Severity.WARN]
    assert "the profile (engine.sglang_version) declares 0.5.12" in out[0].message
    assert flag_findings(check, expected={"the profile": "0.5.23"})[0].severity == Severity.OK
    unknown = flag_findings(
        FlagCheck(method="image", sglang_version="0.5.23", errors=[{"kind": "unknown", "flag": "--x"}]),
        expected={"the image tag": "v0.5.12"},
    )
    assert "but the image tag declares v0.5.12" in unknown[0].message


# ------------------------------------------------------------------ fixes with margins


def test_2x24gib_dflash_27b_gptq_hybrid_fix_is_rechecked_under_0523_with_the_mm_reservation() -> None:
    ctx = ctx_2x3090()
    result = check_launch(DFLASH_2X24, ctx)
    mem = next(f for f in result.findings if f.check == "MemoryFit")
    assert result.memory is not None and result.memory.fits and result.memory.max_running_requests == 2
    assert mem.severity == Severity.WARN and "serves only 2 running request(s), fewer than 4" in mem.message
    assert result.memory_fixes and not any(f.tradeoff for f in result.memory_fixes)
    for fix in result.memory_fixes:
        argv = with_flags(DFLASH_2X24, fix.changes)
        again = memory_plan(argv, ctx, headroom=True)  # the same planner, with the 1 GiB headroom
        assert again is not None and again.ruleset == "0.5.23" and again.mm_reservation == 100 * MIB
        assert again.fits and again.max_running_requests >= 4
        assert again.free_before_load == memory_plan(argv, ctx).free_before_load - 1024 * MIB
        assert int(fix.changes.get("speculative-num-draft-tokens", 16)) >= MIN_DRAFT_TOKENS
        assert not check_launch(argv, ctx).errors
    assert result.fix == result.memory_fixes[0].changes


def test_more_headroom_or_requests_needs_a_bigger_fix() -> None:
    small = check_launch(DFLASH_2X24, ctx_2x3090())
    big = check_launch(DFLASH_2X24, ctx_2x3090(margin=Margin(min_requests=4, headroom_mib=3072)))
    d_small = int(small.memory_fixes[0].changes["speculative-num-draft-tokens"])
    d_big = int(
        next(f for f in big.memory_fixes if "speculative-num-draft-tokens" in f.changes).changes[
            "speculative-num-draft-tokens"
        ]
    )
    assert d_big < d_small


def test_a_load_no_fix_can_serve_gets_tradeoffs_not_a_fix() -> None:
    ctx = ctx_2x3090()
    argv = [*DFLASH_2X24, "--max-running-requests", "64"]
    result = check_launch(argv, ctx)
    assert result.memory_fixes and all(f.tradeoff for f in result.memory_fixes)
    assert "max-running-requests" not in result.fix  # a trade-off is never applied silently
    mem = next(f for f in result.findings if f.check == "MemoryFit")
    assert "no flag change serves 64 running requests with 1024 MiB headroom; trade-offs:" in mem.fix
    fewer = next(f for f in result.memory_fixes if "max-running-requests" in f.changes)
    n = int(fewer.changes["max-running-requests"])
    assert 1 <= n < 64 and fewer.plan.max_running_requests >= n
    assert memory_plan(with_flags(argv, {"max-running-requests": str(n)}), ctx, headroom=True).fits
    for fix in result.memory_fixes:
        assert int(fix.changes.get("speculative-num-draft-tokens", 16)) >= MIN_DRAFT_TOKENS
    # two GPUs in the box: tp=4 is not offered; a box with eight gets it
    assert not any("tp" in f.changes for f in result.memory_fixes)
    eight = check_launch(argv, replace(ctx, gpus_per_node={"box": 8}))
    assert any("more GPUs: tp=" in f.why for f in eight.memory_fixes)


def test_draft_token_fixes_never_go_below_two() -> None:
    # Only a single draft token would serve 24 requests here: it drafts nothing, so it is not offered.
    ctx = ctx_2x3090(margin=Margin(min_requests=24))
    result = check_launch([*DFLASH_2X24, "--kv-cache-dtype", "fp8_e4m3"], ctx)
    one = memory_plan(
        with_flags(
            [*DFLASH_2X24, "--kv-cache-dtype", "fp8_e4m3"],
            {"speculative-num-draft-tokens": "1", "mem-fraction-static": "0.95"},
        ),
        ctx,
        headroom=True,
    )
    assert one is not None and one.max_running_requests >= 1
    for fix in result.memory_fixes:
        assert int(fix.changes.get("speculative-num-draft-tokens", 16)) >= MIN_DRAFT_TOKENS, fix.changes


def test_preflight_hands_its_probed_gpu_report_to_the_pipeline(monkeypatch) -> None:
    from sparkctl.engines.sglang.launch.pipeline import preflight_findings
    from sparkctl.planning.build import build_plan
    from sparkctl.profile import load_profile_text

    monkeypatch.setenv(
        "SPARKCTL_SGLANG_PYTHON", "/nonexistent/python3"
    )  # the parser path is tested elsewhere
    prof = load_profile_text(
        "cluster: h\nnodes:\n  - {name: n1, address: local, gpus: 1}\nimage: {ref: 'lmsysorg/sglang:v0.5.23'}\n"
        f"model:\n  target: {{id: meta/llama, local_dir: '{MODELS / 'llama-3.1-8b'}'}}\n"
        "engine: {sglang_version: '0.5.23', args: {mem-fraction-static: 0.8, sleep-on-idle: true}}\n"
        "modes:\n  solo: {nodes: [n1], tp: 1, default: true}\n"
    )
    report = probe.report_from_smi((GPU_FIX / "h200/query-gpu.csv").read_text())
    found = preflight_findings(build_plan(prof, "solo"), prof, None, {"n1": report})
    mem = next(f for f in found if f.check == "MemoryFit")
    assert mem.severity == Severity.OK
    assert mem.data["free_source"] == "free GPU memory probed on n1: 143156 MiB"
    without = preflight_findings(build_plan(prof, "solo"), prof, None, {})
    assert next(f for f in without if f.check == "MemoryFit").severity == Severity.SKIP  # no gpu facts at all


def test_a_launch_that_fits_only_without_the_headroom_is_a_warning_with_a_fix() -> None:
    ctx = LaunchContext(gpus=[RTX3090], gpus_per_node={"box": 1}, target=LLAMA, sglang_version="0.5.23")
    argv = [*BASE, "--max-running-requests", "4"]
    # the smallest fraction that serves 4 requests as measured, found with the planner itself
    m = next(
        f"{x / 100:.2f}"
        for x in range(30, 96)
        if (p := memory_plan(with_flags(argv, {"mem-fraction-static": f"{x / 100:.2f}"}), ctx))
        and p.fits
        and p.max_running_requests >= 4
    )
    tight = with_flags(argv, {"mem-fraction-static": m})
    result = check_launch(tight, ctx)
    mem = next(f for f in result.findings if f.check == "MemoryFit")
    assert result.memory.fits and mem.severity == Severity.WARN
    assert mem.message.startswith("fits with less than 1024 MiB to spare")
    assert float(result.fix["mem-fraction-static"]) > float(m)
    no_margin = check_launch(tight, LaunchContext(**{**ctx.__dict__, "margin": Margin(headroom_mib=0)}))
    assert next(f for f in no_margin.findings if f.check == "MemoryFit").severity == Severity.OK
