"""`sparkctl fit` / `plan --check` run the one launch pipeline: SGLang's real parser (a local
SGLang here; the in-image path is tested on the testbed), rules, memory with probed facts."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sparkctl.cli import app

MODELS = Path(__file__).parents[2] / "fixtures" / "models"
TARGET, DRAFT = MODELS / "qwen3.6-27b-gptq-int4", MODELS / "qwen3.6-27b-dflash"
PROFILE = """
cluster: fitbox
nodes:
  - name: box
    address: local
    gpus: 2
    gpu: {name: NVIDIA GeForce RTX 3090, memory_gib: 24, compute_capability: "8.6"}
image: {ref: "lmsysorg/sglang:v0.5.23"}
model:
  hf_cache: %(hf)s
  target: {id: Qwen/Qwen3.6-27B-GPTQ-Int4}
  draft: {id: z-lab/Qwen3.6-27B-DFlash}
engine:
  options: {version: "%(version)s"}
  args:
    attention-backend: flashinfer
    speculative-draft-attention-backend: flashinfer
    mem-fraction-static: 0.92
    speculative-num-draft-tokens: 4
    context-length: 32k
    max-running-requests: %(mrr)s
    kv-cache-dtype: fp8_e5m2
    sleep-on-idle: true
    stream-interval: 1
%(extra)s
modes:
  tp2: {nodes: [box], tp: 2, default: true}
"""


def profile(tmp_path: Path, *, version: str = "0.5.23", mrr: str = "4", extra: str = "") -> Path:
    (tmp_path / "hf").mkdir(exist_ok=True)
    path = tmp_path / "p.yaml"
    path.write_text(PROFILE % {"hf": tmp_path / "hf", "version": version, "mrr": mrr, "extra": extra})
    return path


def fit(path: Path, *args: str, env: dict[str, str] | None = None):
    argv = ["fit", "-p", str(path), "--no-probe", "--json", *args]
    return CliRunner().invoke(app, argv, env={"COLUMNS": "200", **(env or {})})


def with_models(*args: str) -> tuple[str, ...]:
    return ("--target-dir", str(TARGET), "--draft-dir", str(DRAFT), *args)


@pytest.fixture
def parser() -> None:
    if importlib.util.find_spec("sglang") is None and not os.environ.get("SPARKCTL_SGLANG_PYTHON"):
        if os.environ.get("CI"):
            pytest.fail("sglang must be installed in CI (the real-parser tests)", pytrace=False)
        pytest.skip("sglang is not installed")


def findings(res) -> list[dict]:
    return json.loads(res.stdout)["findings"]


def test_fit_passes_a_valid_profile_with_the_real_parser(tmp_path: Path, parser: None) -> None:
    res = fit(profile(tmp_path), *with_models())
    assert res.exit_code == 0, res.output
    flags = [f for f in findings(res) if f["check"] == "FlagsValid"]
    assert [f["severity"] for f in flags] == ["ok"] and "0.5.23" in flags[0]["message"]
    mem = next(f for f in findings(res) if f["check"] == "MemoryFit")
    assert mem["severity"] == "ok" and mem["data"]["max_running_requests"] >= 4


def test_fit_catches_a_misspelled_flag(tmp_path: Path, parser: None) -> None:
    res = fit(profile(tmp_path, extra="    mem-fractoin-static: 0.8"), *with_models())
    assert res.exit_code == 1, res.output
    bad = next(f for f in findings(res) if f["data"].get("flag") == "--mem-fractoin-static")
    assert bad["severity"] == "error" and "has no flag --mem-fractoin-static" in bad["message"]
    assert bad["fix"] == "use --mem-fraction-static"


def test_fit_catches_a_non_numeric_value(tmp_path: Path, parser: None) -> None:
    res = fit(profile(tmp_path, mrr="lots"), *with_models())
    assert res.exit_code == 1, res.output
    bad = [f for f in findings(res) if f["check"] == "FlagsValid" and f["severity"] == "error"]
    assert any(f["data"].get("value") == "lots" and "--max-running-requests" in f["message"] for f in bad)


def test_fit_without_a_parser_warns_what_was_not_checked_and_still_catches_values(tmp_path: Path) -> None:
    res = fit(
        profile(tmp_path, mrr="lots"), *with_models(), env={"SPARKCTL_SGLANG_PYTHON": "/nonexistent/py"}
    )
    assert res.exit_code == 1, res.output
    flag = [f for f in findings(res) if f["check"] == "FlagsValid"]
    warn = next(f for f in flag if f["severity"] == "warn")
    assert "NOT checked with SGLang's parser" in warn["message"] and warn["data"]["checked"] is False
    assert any(f["severity"] == "error" and "'lots' is not an integer" in f["message"] for f in flag)


def test_fit_names_a_parser_version_mismatch(tmp_path: Path, parser: None) -> None:
    res = fit(profile(tmp_path, version="0.5.12"), *with_models())
    flag = [f for f in findings(res) if f["check"] == "FlagsValid"]
    assert not any(f["severity"] == "ok" for f in flag)  # 0.5.23's parser cannot vouch for 0.5.12
    warn = next(f for f in flag if f["data"].get("mismatch"))
    assert "the profile (engine.options.version) declares 0.5.12" in warn["message"]
    assert "SGLang 0.5.23" in warn["message"]


def test_fit_without_the_model_exits_1_naming_the_searched_paths(tmp_path: Path) -> None:
    path = profile(tmp_path)
    res = CliRunner().invoke(
        app, ["fit", "-p", str(path), "--no-probe", "--no-parse-flags"], env={"COLUMNS": "300"}
    )
    assert res.exit_code == 1, res.output
    text = " ".join(res.output.split())
    assert "model not on this machine, nothing was checked" in text
    assert "Qwen/Qwen3.6-27B-GPTQ-Int4" in text and str(tmp_path / "hf") in text
    assert f"sparkctl -p {path} ship --weights" in text and "--allow-missing" in text


def test_fit_allow_missing_checks_rules_and_does_not_ask_for_a_gpu_that_is_set(tmp_path: Path) -> None:
    res = fit(profile(tmp_path), "--allow-missing", "--no-parse-flags")
    assert res.exit_code == 0, res.output
    mem = next(f for f in findings(res) if f["check"] == "MemoryFit")
    assert mem["severity"] == "skip" and "target model config not found" in mem["message"]
    assert "nodes[].gpu" not in (mem["fix"] or "")


def test_plan_check_without_a_parser_is_not_silent(tmp_path: Path) -> None:
    env = {"COLUMNS": "200", "SPARKCTL_SGLANG_PYTHON": "/nonexistent/py"}
    path = profile(tmp_path)
    res = CliRunner().invoke(
        app, ["plan", "-p", str(path), "--check", "--json", "--parser-timeout", "5"], env=env
    )
    assert res.exit_code == 0, res.output
    flag = [f for f in json.loads(res.stdout)["check"] if f["check"] == "FlagsValid"]
    assert [f["severity"] for f in flag] == ["warn"] and "NOT checked" in flag[0]["message"]


def test_an_engine_launch_does_not_model_runs_its_own_check_not_sglangs() -> None:
    """vLLM's flags are judged by vLLM's check (its parser, arch rules, memory model), never by
    SGLang's parser: `fit` on the shipped vLLM profile reports only the vLLM engine's findings."""
    from sparkctl.engines.vllm.check import CHECK_NAMES

    shipped = Path(__file__).parents[3] / "profiles" / "vllm-two-gpu-box.yaml"
    res = CliRunner().invoke(
        app,
        ["fit", "tp2", "-p", str(shipped), "--allow-missing", "--no-probe", "--json"],
        catch_exceptions=False,
    )
    doc = json.loads(res.stdout)
    names = {f["check"] for f in doc["findings"]}
    assert names and names <= CHECK_NAMES, names
    assert not [f for f in doc["findings"] if f["severity"] == "error"], doc["findings"]


@pytest.mark.parametrize("where", ["engine.args", "modes.tp2.args"])
def test_a_refused_flag_names_the_file_line_and_key_that_set_it(tmp_path: Path, where: str) -> None:
    """`--mem-fraction-static 1.5: ...` named the flag only, its fix engine.args even when a mode's
    args set it (issue 42: refusals of the plan name the profile's file, line and key)."""
    env = {"COLUMNS": "200", "SPARKCTL_SGLANG_PYTHON": "/nonexistent/py"}
    path = profile(tmp_path)
    text = path.read_text()
    if where == "engine.args":
        text = text.replace("mem-fraction-static: 0.92", "mem_fraction_static: 1.5")
    else:
        text = text.replace("default: true}", "default: true, args: {mem-fraction-static: 1.5}}")
    path.write_text(text)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if ": 1.5" in ln)
    key = f"{where}.{'mem_fraction_static' if where == 'engine.args' else 'mem-fraction-static'}"
    res = fit(path, "--allow-missing", env=env)
    assert res.exit_code == 1, res.output
    said = {f["check"]: f["message"] for f in findings(res) if f["severity"] == "error"}
    assert said["MemFraction"].startswith(f"{path}:{line}: {key}: --mem-fraction-static 1.5"), said
    res = CliRunner().invoke(
        app, ["plan", "-p", str(path), "--check", "--json", "--parser-timeout", "5"], env=env
    )
    assert res.exit_code == 1, res.output
    check = {f["check"]: f["message"] for f in json.loads(res.stdout)["check"] if f["severity"] == "error"}
    assert check["MemFraction"] == said["MemFraction"], check
