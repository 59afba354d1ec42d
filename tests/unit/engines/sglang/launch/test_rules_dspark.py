"""DSPARK: its rules (speculative_hook.py `_handle_dspark`) and its memory: gamma + 1 verified
tokens a step, and the draft's own KV pool in bf16 or fp8 (--speculative-draft-kv-cache-dtype)."""

from __future__ import annotations

import json
from pathlib import Path

from sparkctl.engines.sglang.launch.check import LaunchContext, check_launch
from sparkctl.engines.sglang.launch.inputs import GpuFacts, LaunchSettings
from sparkctl.engines.sglang.launch.memory import MemoryInputs, plan_memory
from sparkctl.engines.sglang.launch.model_meta import facts_from_config, load_model_facts
from sparkctl.engines.sglang.launch.rules_dflash import check_dflash

MODELS = Path(__file__).parents[4] / "fixtures" / "models"
GPTQ = load_model_facts(MODELS / "qwen3.6-27b-gptq-int4")
NVFP4 = load_model_facts(MODELS / "qwen3.6-27b-nvfp4")
GB10 = GpuFacts("NVIDIA GB10", 131072, (12, 1), unified=True)
BASE = ["python3", "-m", "sglang.launch_server", "--model-path", "m", "--stream-interval", "1"]
DSPARK = ["--speculative-algorithm", "DSPARK", "--speculative-draft-model-path", "d"]


def draft(layers: int = 5, kv_heads: int = 4, block: int | None = None):
    """A DFlash-family draft: 5 layers x 4 KV heads x (128 + 128) x 2 bytes = 10240 bytes/token in bf16."""
    cfg = json.loads((MODELS / "qwen3.6-27b-dflash" / "config.json").read_text())
    cfg.update(num_hidden_layers=layers, num_key_value_heads=kv_heads)
    cfg.pop("block_size", None)
    if block:
        cfg["block_size"] = block
    return facts_from_config(cfg, name="dspark-draft")


def s_(*flags: str) -> LaunchSettings:
    return LaunchSettings.from_argv([*BASE, *DSPARK, *flags])


def names(findings) -> list[str]:
    return [f.check for f in findings if f.severity.value == "error"]


def test_dspark_verifies_gamma_plus_one_tokens() -> None:
    assert s_().draft_tokens(None) == 8  # DEFAULT_DSPARK_GAMMA 7 + 1
    assert s_("--speculative-dspark-block-size", "3").draft_tokens(16) == 4
    assert s_().draft_tokens(5) == 6  # gamma from the draft checkpoint's block size
    assert s_("--speculative-num-draft-tokens", "5").draft_tokens(None) == 5


def test_dspark_rules_mirror_handle_dspark() -> None:
    assert names(check_dflash(s_("--speculative-dspark-block-size", "0"), GPTQ, draft())) == [
        "DsparkBlockSize"
    ]
    bad = check_dflash(
        s_("--speculative-dspark-block-size", "3", "--speculative-num-draft-tokens", "3"), GPTQ, draft()
    )
    assert names(bad) == ["DsparkBlockSize"] and "must equal gamma + 1 (= 4 for gamma=3)" in bad[0].message
    assert bad[0].data["fix_flags"] == {"speculative-num-draft-tokens": "4"}
    assert names(check_dflash(s_("--speculative-num-draft-tokens", "1"), GPTQ, draft())) == [
        "DsparkBlockSize"
    ]
    assert names(check_dflash(s_("--pp-size", "2"), GPTQ, draft())) == ["DsparkPipeline"]
    ok = check_dflash(
        s_("--speculative-dspark-block-size", "3", "--speculative-num-draft-tokens", "4"), GPTQ, draft()
    )
    assert names(ok) == []
    # the DFLASH-only block-size rule does not apply to DSPARK
    assert "DflashBlockSize" not in names(
        check_dflash(s_("--speculative-dflash-block-size", "0"), GPTQ, draft())
    )
    nopath = LaunchSettings.from_argv([*BASE, "--speculative-algorithm", "DSPARK"])
    assert [f.check for f in check_dflash(nopath, GPTQ, draft())] == ["DsparkDraftPath"]


def _plan(*flags: str):
    s = s_("--tp", "1", "--mem-fraction-static", "0.85", "--max-running-requests", "8", *flags)
    return plan_memory(MemoryInputs(s, GB10, NVFP4, draft(), "0.5.23"))


def test_dspark_draft_kv_is_10240_bytes_per_token_in_bf16_and_half_in_fp8() -> None:
    bf16 = _plan("--kv-cache-dtype", "bf16")
    fp8 = _plan("--kv-cache-dtype", "bf16", "--speculative-draft-kv-cache-dtype", "fp8_e4m3")
    assert bf16.kv_cell_draft_bytes == 10240 and fp8.kv_cell_draft_bytes == 5120
    assert bf16.kv_cell_bytes - fp8.kv_cell_bytes == 5120
    assert fp8.kv_tokens > bf16.kv_tokens  # the draft pool is per target token: fp8 frees KV room


def test_dspark_mamba_scratch_follows_gamma_plus_one() -> None:
    default, dflash8 = _plan(), plan_memory(
        MemoryInputs(
            LaunchSettings.from_argv(
                [*BASE, "--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "d",
                 "--speculative-num-draft-tokens", "8", "--tp", "1", "--mem-fraction-static", "0.85",
                 "--max-running-requests", "8"]
            ),
            GB10, NVFP4, draft(), "0.5.23",
        )
    )  # fmt: skip
    assert default.mamba is not None and default.mamba.intermediate_bytes == dflash8.mamba.intermediate_bytes


def test_a_dspark_launch_goes_through_the_whole_check() -> None:
    ctx = LaunchContext([GB10], {"spark1": 1}, NVFP4, draft(), sglang_version="0.5.23")
    result = check_launch([*BASE, *DSPARK, "--sleep-on-idle", "--mem-fraction-static", "0.85"], ctx)
    assert result.memory is not None and result.memory.kv_cell_draft_bytes == 10240  # auto: the draft's bf16
    assert any("DSPARK draft layers" in t for t in result.memory.terms)
    assert not result.errors
