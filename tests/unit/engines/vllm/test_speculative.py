"""vLLM's --speculative-config: dflash / dspark / mtp in the argv sparkctl renders, the offline
method check, and the draft's weights and own KV in the memory model."""

from __future__ import annotations

import json
from pathlib import Path

from sparkctl.engines.vllm import speculative
from sparkctl.engines.vllm.check import memory_findings
from sparkctl.facts.gpu import Gpu, GpuReport
from sparkctl.findings import Severity
from sparkctl.planning.build import build_plan
from sparkctl.profile import load_profile_file
from sparkctl.profile.schema import Profile

ROOT = Path(__file__).resolve().parents[4]
MODELS = ROOT / "tests" / "fixtures" / "models"
GIB = 1 << 30
PROFILE = ROOT / "profiles" / "vllm-solo-spark-dflash.yaml"
DRAFT_CFG = json.loads((MODELS / "qwen3.6-27b-dflash" / "config.json").read_text())


def _argv(cfg: str) -> list[str]:
    return ["vllm", "serve", "m", "--speculative-config", cfg]


def test_the_shipped_dflash_profile_renders_method_model_revision_and_the_users_keys() -> None:
    plan = build_plan(load_profile_file(PROFILE))
    doc = speculative.parse(plan.ranks[0].argv)
    assert doc == {
        "method": "dflash",
        "model": "z-lab/Qwen3.6-27B-DFlash",
        "revision": "5b0d4b5",
        "num_speculative_tokens": 8,
    }
    assert speculative.findings(plan.ranks[0].argv) == []


def test_methods_are_vllms_own() -> None:
    for method in ("dflash", "dspark", "mtp", "qwen3_5_mtp", "eagle3", "ngram"):
        cfg = (
            {"method": method}
            if method in ("mtp", "qwen3_5_mtp", "ngram")
            else {"method": method, "model": "d"}
        )
        assert speculative.findings(_argv(json.dumps(cfg))) == [], method
    (bad,) = speculative.findings(_argv('{"method": "dflsh", "model": "d"}'))
    assert bad.severity is Severity.ERROR and "'dflsh'" in bad.message and bad.fix == '"method": "dflash"'
    (nomodel,) = speculative.findings(_argv('{"method": "dspark"}'))
    assert 'needs a draft "model"' in nomodel.message
    (notjson,) = speculative.findings(_argv("{method: dflash}"))
    assert "not JSON" in notjson.message
    (zero,) = speculative.findings(_argv('{"method": "dflash", "model": "d", "num_speculative_tokens": 0}'))
    assert "positive integer" in zero.message


def test_draft_kv_is_the_drafts_own_layers_at_its_dtype() -> None:
    # 4 layers x 8 KV heads x 128 x (K + V): 16384 bytes/token in bf16 at tp=1, fp8 halves it
    bf16 = speculative.draft_kv_bytes_per_token({"method": "dflash"}, DRAFT_CFG, 1, 2)
    fp8 = speculative.draft_kv_bytes_per_token({"method": "dflash", "kv_cache_dtype": "fp8"}, DRAFT_CFG, 1, 2)
    assert (bf16, fp8) == (16384, 8192)
    assert speculative.draft_kv_bytes_per_token({"method": "dspark"}, DRAFT_CFG, 2, 2) == 8192
    assert speculative.draft_kv_bytes_per_token({"method": "mtp"}, DRAFT_CFG, 1, 2) == 0  # reuses the target


def _gb10(avail_gib: float) -> GpuReport:
    gpu = Gpu(
        index=0, name="NVIDIA GB10", memory_total_mib=None, memory_free_mib=None, compute_capability="12.1"
    )
    return GpuReport([gpu], "nvidia-smi", unified_memory=True, mem_available_mib=int(avail_gib * 1024))


def test_the_memory_model_counts_the_draft_weights_and_its_kv() -> None:
    prof = load_profile_file(PROFILE)
    data = prof.model_dump(mode="json", exclude_none=True)
    data["nodes"][0]["gpu"]["memory_gib"] = 30  # a small box, so the draft decides
    data["engine"]["args"]["max-model-len"] = 24000  # fits beside the target alone, not with the draft
    small = Profile.model_validate(data)
    plan = build_plan(small)
    target_cfg = json.loads((MODELS / "qwen3.6-27b-nvfp4" / "config.json").read_text())
    without = memory_findings(plan, small, {}, model_bytes=17 * GIB, config=target_cfg)
    with_draft = memory_findings(
        plan, small, {}, model_bytes=17 * GIB, config=target_cfg, draft=(int(2.6 * GIB), DRAFT_CFG)
    )
    assert without[0].severity is Severity.OK, without
    assert with_draft[0].severity is Severity.ERROR and "KV cache" in with_draft[0].message, with_draft
