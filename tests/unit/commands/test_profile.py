"""`sparkctl profile check`: ok with every mode's shape, what `plan` would warn about, and a
fleet: every service's modes planned, the memory per node in the services' default modes; a fleet
that does not fit exits 2."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from sparkctl.cli import app
from sparkctl.errors import ExitCode

ROOT = Path(__file__).resolve().parents[3]
BOX = ROOT / "profiles" / "fleet-two-gpu-box.yaml"
ENV = {"COLUMNS": "400", "SPARKCTL_PROFILE": "", "SPARKCTL_DEBUG": ""}


def test_a_spark_without_gpu_is_warned_about_by_profile_check(tmp_path: Path) -> None:
    """It said `ok profile` and nothing else: no memory cap, admission, settle or guard, silently."""
    text = re.sub(
        r"\n    gpu: \{name: NVIDIA GB10[^\n]*", "", (ROOT / "profiles" / "dual-spark.yaml").read_text()
    )
    path = tmp_path / "p.yaml"
    path.write_text(text)
    res = CliRunner().invoke(app, ["profile", "check", "-p", str(path)], env=ENV)
    assert res.exit_code == 0 and res.output.startswith("ok profile"), res.output
    said = [ln for ln in res.output.splitlines() if "looks like a DGX Spark but has no gpu: section" in ln]
    assert [ln.split()[:2] for ln in said] == [["warning:", "nodes.spark1"], ["warning:", "nodes.spark2"]]
    data = json.loads(
        CliRunner().invoke(app, ["profile", "check", "-p", str(path), "--json"], env=ENV).stdout
    )
    assert sum("has no gpu: section" in w for w in data["warnings"]) == 2, data["warnings"]


def test_a_warning_shared_by_every_mode_is_said_once() -> None:
    path = ROOT / "profiles" / "dual-spark.yaml"
    res = CliRunner().invoke(app, ["profile", "check", "-p", str(path)], env=ENV)
    assert res.exit_code == 0, res.output
    assert res.output.count("warning: model.target.revision is main") == 1, res.output


def check(*args: str):
    return CliRunner().invoke(app, ["profile", "check", *args], env=ENV)


def test_profile_check_of_a_fleet_names_the_services_ports_and_memory() -> None:
    res = check("-p", str(BOX))
    assert res.exit_code == ExitCode.OK, res.output
    assert res.output.startswith("ok profile for cluster fleetbox: 1 node(s), a fleet of 2 services:")
    assert "chat (sglang, port 30000: solo (tp=1 on box))" in res.output
    assert "coder (vllm, port 30010: solo (tp=1 on box))" in res.output
    assert (
        "memory on box: chat 22.8 + coder 21.6 = 44.4 GiB (GPU 0: 22.8, GPU 1: 21.6 of 24 GiB each)"
        in res.output
    )


def test_profile_check_json_of_a_fleet() -> None:
    res = check("--json", "-p", str(BOX))
    doc = json.loads(res.output)
    assert doc["fleet"] is True and doc["services"]["coder"]["port"] == 30010
    assert doc["services"]["chat"]["modes"]["solo"]["nodes"] == ["box"]
    assert doc["memory"][0]["gpus"] == {"0": 22.8, "1": 21.6}


def test_profile_check_refuses_services_sharing_a_gpu_over_its_memory(tmp_path: Path) -> None:
    shared = tmp_path / "shared.yaml"
    shared.write_text(BOX.read_text().replace("gpu_ids: [1]", "gpu_ids: [0]"))
    res = check("-p", str(shared))
    assert res.exit_code == ExitCode.USAGE, res.output
    assert "[node box] the services' memory does not fit" in res.output and "GPU 0: 44.4" in res.output
