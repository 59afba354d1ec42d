"""SGLang's REAL argument parser (sglang installed without its GPU stack) catches a renamed flag.

Install: see docs/launch-safety.md. Outside CI a missing sglang skips with the reason; with env
CI set it is a failure.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

from sparkctl.engines.sglang.launch.flags import INSTALL_HINT, check_flags_local, flag_findings
from sparkctl.findings import Severity


@pytest.fixture(scope="module")
def sglang_python() -> None:
    if importlib.util.find_spec("sglang") is None and not os.environ.get("SPARKCTL_SGLANG_PYTHON"):
        reason = f"sglang is not installed: {INSTALL_HINT}"
        if os.environ.get("CI"):
            pytest.fail(reason + " (CI must run the real-parser test)", pytrace=False)
        pytest.skip(reason)


@pytest.mark.slow
def test_real_parser_catches_renamed_flag_and_bad_choice(sglang_python: None) -> None:
    flags = [
        "--model-path",
        "Qwen/Qwen3.6-27B",
        "--tp",
        "2",
        "--mamba-scheduler-strategy",
        "extra_buffer",
        "--attention-backend",
        "fa5",
        "--sleep-on-idle",
    ]
    result = check_flags_local(flags)
    assert result.method == "local", result.problem
    assert result.sglang_version
    findings = flag_findings(result)
    renamed = next(f for f in findings if f.data.get("flag") == "--mamba-scheduler-strategy")
    assert renamed.severity == Severity.ERROR
    assert renamed.fix == "use --mamba-radix-cache-strategy"
    assert result.sglang_version in renamed.message
    choice = next(f for f in findings if f.data.get("flag") == "--attention-backend")
    assert "flashinfer" in choice.data["allowed"] and "fa5" not in choice.data["allowed"]


@pytest.mark.slow
def test_real_parser_accepts_the_recipe_flags(sglang_python: None) -> None:
    flags = [
        "--model-path",
        "m",
        "--attention-backend",
        "flashinfer",
        "--kv-cache-dtype",
        "fp8_e4m3",
        "--mamba-radix-cache-strategy",
        "extra_buffer",
        "--speculative-algorithm",
        "DFLASH",
        "--speculative-num-draft-tokens",
        "8",
        "--mem-fraction-static",
        "0.90",
        "--sleep-on-idle",
        "--stream-interval",
        "1",
        "--reasoning-parser",
        "qwen3",
        "--tool-call-parser",
        "qwen3_coder",
    ]
    result = check_flags_local(flags)
    assert result.ok, (result.errors, result.parser_error, result.problem)
    assert [f.severity for f in flag_findings(result)] == [Severity.OK]


@pytest.mark.slow
def test_the_local_parsers_answer_is_reused_for_the_same_install_and_flags(
    sglang_python: None, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("SPARKCTL_SGLANG_PYTHON", raising=False)
    flags = ["--model-path", "org/m", "--attention-backend", "fa5"]
    first = check_flags_local(flags)
    assert first.method == "local" and first.errors
    assert list((tmp_path / "sparkctl" / "flag-parser").glob("*.json"))

    def no_subprocess(*_a, **_k):
        raise AssertionError("the parser ran again for the same install and flags")

    monkeypatch.setattr(subprocess, "run", no_subprocess)
    again = check_flags_local(flags)
    assert (again.method, again.errors, again.sglang_version) == ("local", first.errors, first.sglang_version)
    with pytest.raises(AssertionError, match="ran again"):
        check_flags_local([*flags, "--tp", "2"])  # other flags: asked again
