"""`sparkctl profile check` of a fleet: every service's modes planned, the memory per node in the
services' default modes; a fleet that does not fit exits 2."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from sparkctl.cli import app
from sparkctl.errors import ExitCode

ROOT = Path(__file__).resolve().parents[3]
BOX = ROOT / "profiles" / "fleet-two-gpu-box.yaml"
ENV = {"COLUMNS": "200", "SPARKCTL_PROFILE": "", "SPARKCTL_DEBUG": ""}


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
