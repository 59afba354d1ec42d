"""The memory plan in words: the term that broke the budget, the cost of each fix, no negative
counts, and trade-off layouts only on GPUs the boxes have (the 2x3090 user's exact flags)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from sparkctl.engines.sglang.launch import report
from sparkctl.engines.sglang.launch.check import LaunchContext, check_launch
from sparkctl.engines.sglang.launch.explain import accepted_length, cause, count, draft_cost, gib
from sparkctl.engines.sglang.launch.inputs import GpuFacts, LaunchSettings
from sparkctl.engines.sglang.launch.model_meta import load_model_facts

MODELS = Path(__file__).parents[4] / "fixtures" / "models"
GPTQ = load_model_facts(MODELS / "qwen3.6-27b-gptq-int4")
NVFP4 = load_model_facts(MODELS / "qwen3.6-27b-nvfp4")
DRAFT = load_model_facts(MODELS / "qwen3.6-27b-dflash")
RTX3090 = GpuFacts("NVIDIA GeForce RTX 3090", 24576, (8, 6))
GB10 = GpuFacts("NVIDIA GB10", 131072, (12, 1), unified=True)
# profiles/two-gpu-box.yaml's header: the widely reported 2x3090 launch (fa4 aside)
USER = [
    "python3", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3.6-27B-GPTQ-Int4",
    "--tp-size", "2", "--speculative-algorithm", "DFLASH", "--speculative-draft-model-path",
    "z-lab/Qwen3.6-27B-DFlash", "--speculative-num-draft-tokens", "16",
    "--mamba-scheduler-strategy", "extra_buffer", "--mem-fraction-static", "0.8",
    "--stream-interval", "1", "--sleep-on-idle",
]  # fmt: skip


def ctx(version: str) -> LaunchContext:
    return LaunchContext([RTX3090, RTX3090], {"box": 2}, GPTQ, DRAFT, sglang_version=version)


def _memory(result):
    return next(f for f in result.findings if f.check == "MemoryFit")


def test_the_2x3090_users_flags_name_the_draft_tokens_and_the_gib_that_broke_the_budget() -> None:
    result = check_launch(USER, ctx("0.5.12"))
    mem = _memory(result)
    assert mem.severity.value == "error"
    why = mem.data["cause"]
    assert why in mem.message and why.count(". ") == 0  # one sentence
    assert "--speculative-num-draft-tokens 16" in why and "(extra_buffer)" in why
    assert "55.05 GiB of speculative mamba scratch" in why
    assert "against the 9.20 GiB left after the weights" in why and "--mem-fraction-static 0.8" in why


def test_each_proposed_change_says_what_it_gives_up() -> None:
    result = check_launch(USER, ctx("0.5.12"))
    fix = result.memory_fixes[0]
    assert fix.changes["speculative-num-draft-tokens"] == "2"
    assert "16 -> 2 draft tokens: accepted runs of at most 2 tokens per step" in fix.why
    lost = int(re.search(r"roughly (\d+)% of the speculative speed-up lost", fix.why).group(1))
    assert lost > 50  # two draft tokens give up most of what DFlash buys
    assert "FP8 KV cache" in fix.why and "accuracy" in fix.why
    assert "left for activations and CUDA graphs" in fix.why
    assert fix.why in _memory(result).fix


def test_a_short_load_under_0523_names_the_mamba_slots_and_the_scratch() -> None:
    result = check_launch(USER, replace(ctx("0.5.23"), gpus=[RTX3090, RTX3090]))
    mem = _memory(result)
    assert mem.severity.value == "warn"
    why = mem.data["cause"]
    assert "holds 10 slot(s) and each request takes 5" in why and "room for 2 of 4 requests" in why
    assert "--speculative-num-draft-tokens 16 took 3.44 GiB" in why
    fewer = next(f for f in result.memory_fixes if "speculative-num-draft-tokens" in f.changes)
    assert f"16 -> {fewer.changes['speculative-num-draft-tokens']} draft tokens" in fewer.why


def test_counts_below_zero_are_none_left_never_negative() -> None:
    plan = check_launch(USER, ctx("0.5.12")).memory
    rows = dict(report.rows(plan))
    assert rows["mamba slots"].startswith("none left (short by 303)")
    assert rows["KV budget"] == "none left (short by 24.13 GiB)"
    assert not any(re.search(r"(^|\s)-\d", v) for v in rows.values()), rows
    terms = " ".join(plan.terms)  # the line under fit's table
    assert "mamba state: none left (short by 303) + 1 slots" in terms and not re.search(r"(^|\s)-\d", terms)
    assert count(-3) == "none left (short by 3)" and count(4) == "4"
    assert gib(-(1 << 30)) == "none left (short by 1.00 GiB)"


def test_fewer_draft_tokens_cost_more_the_fewer_are_left() -> None:
    assert accepted_length(1) == 1.0 and 5.5 < accepted_length(16) < 6.5
    lost = [int(re.search(r"roughly (\d+)%", draft_cost(16, d)).group(1)) for d in (12, 8, 4, 2)]
    assert lost == sorted(lost) and lost[0] < 20 < 80 < lost[-1]


def test_a_plan_that_serves_the_load_has_no_cause() -> None:
    ok = check_launch(
        [*USER[:-6], "--stream-interval", "1"], replace(ctx("0.5.23"), gpus=[GB10], gpus_per_node={"s": 1})
    )
    s = LaunchSettings.from_argv(USER)
    assert ok.memory is not None and ok.memory.fits
    assert cause(ok.memory, s, 1, 16) is None


def test_trade_off_layouts_never_ask_for_gpus_the_boxes_do_not_have() -> None:
    """Three one-GPU boxes (trio-spark) and a load no fix serves: no --tp beyond 3 GPUs."""
    argv = [*USER, "--max-running-requests", "512"]
    trio = LaunchContext([GB10] * 3, {"spark1": 1, "spark2": 1, "spark3": 1}, NVFP4, DRAFT, "0.5.23")
    for fix in check_launch([*argv, "--tp-size", "1"], replace(trio, group_nnodes=1)).memory_fixes:
        assert "tp" not in fix.changes, fix.why


def test_a_heads_fix_names_only_the_tps_the_boxes_hold() -> None:
    """trio-spark tp3: three one-GPU boxes, 4 KV heads: the fix says 1 or 2, never 8, 12 or 24."""
    trio = LaunchContext([GB10] * 3, {"spark1": 1, "spark2": 1, "spark3": 1}, NVFP4, DRAFT, "0.5.23")
    result = check_launch([*USER, "--tp-size", "3", "--nnodes", "3"], trio)
    heads = [f for f in result.errors if f.check == "TpVsHeads"]
    assert heads and all(f.fix.endswith("hold: one of 1, 2") for f in heads), [f.fix for f in heads]
