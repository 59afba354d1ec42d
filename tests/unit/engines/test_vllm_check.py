"""vLLM launch safety: the memory model of --gpu-memory-utilization, GPU-arch rules, the parser's argv."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkctl.engines.vllm.check import ARCH, arch_findings, memory_findings, serve_args
from sparkctl.engines.vllm.memory import kv_bytes_per_token
from sparkctl.facts.gpu import Gpu, GpuReport
from sparkctl.findings import Severity
from sparkctl.planning.build import build_plan
from sparkctl.profile import load_profile_file
from sparkctl.profile.schema import Profile

ROOT = Path(__file__).resolve().parents[3]
GIB = 1 << 30
QWEN_32B = {"num_hidden_layers": 64, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128}


def box(args: dict | None = None) -> Profile:
    prof = load_profile_file(ROOT / "profiles" / "vllm-two-gpu-box.yaml")
    data = prof.model_dump(mode="json", exclude_none=True)
    data["engine"]["args"].update(args or {})
    return Profile.model_validate(data)


def report(free_gib: float, total_gib: float = 24.0) -> GpuReport:
    gpus = tuple(
        Gpu(
            i,
            "RTX 3090",
            memory_total_mib=int(total_gib * 1024),
            memory_free_mib=int(free_gib * 1024),
            compute_cap="8.6",
        )
        for i in range(2)
    )
    return GpuReport(gpus=gpus, source="nvidia-smi")


def test_kv_bytes_per_token_split_over_tp_and_halved_by_fp8() -> None:
    argv = ["vllm", "serve", "m"]
    assert kv_bytes_per_token(QWEN_32B, 1, argv) == 2 * 64 * 8 * 128 * 2
    assert kv_bytes_per_token(QWEN_32B, 2, argv) == 2 * 64 * 4 * 128 * 2
    assert kv_bytes_per_token(QWEN_32B, 16, argv) == 2 * 64 * 1 * 128 * 2  # KV heads replicated past 8
    assert kv_bytes_per_token(QWEN_32B, 1, [*argv, "--kv-cache-dtype", "fp8"]) == 2 * 64 * 8 * 128


def test_memory_fits_then_each_limit_in_turn() -> None:
    prof = box()
    plan = build_plan(prof, "tp2")
    ok = memory_findings(plan, prof, {"box": report(23.5)}, model_bytes=9 * GIB, config=QWEN_32B)
    assert [f.severity for f in ok] == [Severity.OK]
    busy = memory_findings(plan, prof, {"box": report(12.0)}, model_bytes=9 * GIB, config=QWEN_32B)
    assert busy[0].severity == Severity.ERROR and "only 12.0 GiB are free" in busy[0].message
    big = memory_findings(plan, prof, {"box": report(23.5)}, model_bytes=60 * GIB, config=QWEN_32B)
    assert "share of the weights alone is 30.0 GiB" in big[0].message
    long = build_plan(box({"max-model-len": 131072}), "tp2")
    kv = memory_findings(long, prof, {"box": report(23.5)}, model_bytes=30 * GIB, config=QWEN_32B)
    assert (
        kv[0].severity == Severity.ERROR
        and "--max-model-len 131072: one sequence needs 16.00 GiB" in kv[0].message
    )


def test_gb10_above_the_cap_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKCTL_API_KEY", "k")
    prof = load_profile_file(ROOT / "profiles" / "vllm-dual-spark.yaml")
    data = prof.model_dump(mode="json", exclude_none=True)
    data["engine"]["args"]["gpu-memory-utilization"] = 0.95
    plan = build_plan(Profile.model_validate(data), "tp2")
    found = memory_findings(plan, Profile.model_validate(data), {})
    assert {f.node for f in found} == {"spark1", "spark2"} and all("hard-reboot" in f.message for f in found)


def test_arch_rules_old_gpu_and_fp8_kv_before_ada() -> None:
    prof = box({"kv-cache-dtype": "fp8"})
    found = arch_findings(build_plan(prof, "solo"), prof)
    assert found[0].check == ARCH and found[0].severity == Severity.ERROR and "sm89" in found[0].message
    data = box().model_dump(mode="json", exclude_none=True)
    data["nodes"][0]["gpu"]["compute_capability"] = "6.1"
    old = Profile.model_validate(data)
    assert "older than vLLM supports" in arch_findings(build_plan(old, "solo"), old)[0].message
    assert arch_findings(build_plan(box(), "solo"), box())[0].severity == Severity.OK


def test_the_parser_gets_the_serve_args_without_the_secret_config() -> None:
    argv = ["vllm", "serve", "m", "--config", "/run/secrets/k.yaml", "--port", "1"]
    assert serve_args(argv, ["vllm", "serve"]) == ["m", "--port", "1"]


def test_flags_run_with_the_default_command_when_the_profile_names_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A shipped vLLM profile has no engine.command: the check strips `vllm serve` (was a TypeError)."""
    from sparkctl.engines.support import in_image
    from sparkctl.engines.vllm.check import FLAGS, flag_findings

    prof = box()
    assert prof.engine.command is None
    seen: list[list[str]] = []

    def runner(*_a: object, **_k: object):
        def run(argv: list[str]) -> tuple[int, str, str]:
            seen.append(argv)
            return 0, "vllm-flags-ok", ""

        return run

    monkeypatch.setattr(in_image, "image_runner", runner)

    class Pool:
        def get(self, _node: str) -> object:
            return object()

    plan = build_plan(prof)
    [finding] = flag_findings(plan, prof, Pool())  # type: ignore[arg-type]
    assert finding.check == FLAGS and finding.severity is Severity.OK
    assert seen[0][3] == plan.ranks[0].argv[2] != "serve", (
        seen
    )  # python3 -c PARSER MODEL ...: `vllm serve` stripped
