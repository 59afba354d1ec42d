"""commands/_from_command.py: `sparkctl init --from-command ... --json`, one object on stdout
(the profile, the notes, fit's verdict, the next steps) and the exit codes of the text form."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from sparkctl.cli import app
from sparkctl.profile import load_profile_text
from tests.unit.commands.test_init import RTX3090, USER_B, hf_with

NO_PARSER = {"SPARKCTL_SGLANG_PYTHON": "/nonexistent", "COLUMNS": "200"}  # no local parser run (seconds)
TP2_LINE = (
    "python3 -m sglang.launch_server --model-path Qwen/Qwen3.6-27B-NVFP4 --tp 2 --nnodes 2 --node-rank 0 "
    "--dist-init-addr 192.168.100.10:50051 --mem-fraction-static 0.90 --host 0.0.0.0 --port 8888"
)


def init(*args: str):
    return CliRunner().invoke(app, ["init", "--no-probe", *args], env=NO_PARSER)


def test_user_b_json_is_one_object_with_the_profile_and_fit_s_verdict(tmp_path: Path) -> None:
    hf = hf_with(
        tmp_path,
        ("Qwen/Qwen3.6-27B-GPTQ-Int4", "qwen3.6-27b-gptq-int4"),
        ("z-lab/Qwen3.6-27B-DFlash", "qwen3.6-27b-dflash"),
    )
    line = f"docker run --gpus all -v {hf}:/root/.cache/huggingface lmsysorg/sglang:v0.5.23 {USER_B}"
    res = init("--from-command", line, "--gpu", RTX3090, "--json")
    assert res.exit_code == 1, res.output  # fit found an error, as without --json
    data = json.loads(res.stdout)  # nothing else on stdout: no YAML before it
    assert data["ok"] is False and data["mode"] == "tp2" and data["written"] is None
    assert load_profile_text(data["profile"]).engine.options["version"] == "0.5.23"
    errors = [f for f in data["fit"]["findings"] if f["severity"] == "error"]
    assert any(f["check"] == "AttentionBackendArch" and "fa4" in f["message"] for f in errors), errors
    assert data["fit"]["fixes"] and all("flags" in f and "why" in f for f in data["fit"]["fixes"])
    assert "fit tp2:" not in res.stderr  # the verdict is in the object, not rendered beside it


def test_placeholders_and_next_steps_in_json_and_the_file_written(tmp_path: Path) -> None:
    out = tmp_path / "p.yaml"
    res = init("--from-command", TP2_LINE, "--peer", "spark@spark2.local", "--image", "i/m:1", "-o", str(out),
               "--json")  # fmt: skip
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["ok"] is True and data["written"] == str(out) and out.read_text() == data["profile"]
    assert any(p.startswith("nodes[1].fabric.ip") for p in data["placeholders"]), data["placeholders"]
    assert data["fit"]["mode"] == "tp2"  # every node is named: fit ran (not reaching them: placeholders)
    assert data["next"] == [f"sparkctl profile check -p {out}", f"sparkctl fit -p {out} tp2"]
    assert yaml.safe_load(data["profile"])["modes"]["tp2"]["tp"] == 2


def test_a_refused_line_is_the_json_error_object_and_exit_2() -> None:
    res = init("--from-command", "vllm serve a/b | tee log", "--json")
    assert res.exit_code == 2, res.output
    data = json.loads(res.stdout)
    assert data["ok"] is False and "'|' joins several commands" in data["error"]["message"]
    assert data["error"]["code"] == 2 and data["error"]["fix"]


def test_json_without_from_command_is_a_usage_error() -> None:
    res = init("--json", "--non-interactive")
    assert (
        res.exit_code == 2 and "--json goes with --from-command" in json.loads(res.stdout)["error"]["message"]
    )
