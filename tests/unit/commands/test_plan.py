"""`sparkctl plan` of a fleet: every service, its ranks, its budget per node, the sum per node;
refused (exit 2) with the per-node sums and a fix when the budgets do not fit. The single-model
plan's output is pinned by tests/golden (test_cli_golden.py)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from sparkctl.cli import app
from sparkctl.errors import ExitCode

ROOT = Path(__file__).resolve().parents[3]
SPARKS = ROOT / "profiles" / "fleet-two-sparks.yaml"
ENV = {"COLUMNS": "100", "SPARKCTL_PROFILE": "", "SPARKCTL_DEBUG": ""}


def plan(*args: str):
    return CliRunner().invoke(app, ["plan", *args], env=ENV)


def test_plan_of_a_fleet_shows_every_service_and_the_memory_per_node() -> None:
    res = plan("-p", str(SPARKS))
    assert res.exit_code == ExitCode.OK, res.output
    assert "service chat mode tp2: tp=2 on spark1+spark2" in res.output
    assert "service coder mode solo: tp=1 on spark2" in res.output
    assert "sparkctl-fleetduo-coder-solo-r0" in res.output
    assert "memory per node (GiB)" in res.output and "116.8" in res.output and "fits" in res.output


def test_plan_json_of_a_fleet_is_one_document_with_services_and_nodes() -> None:
    res = plan("chat:solo", "--json", "-p", str(SPARKS))
    assert res.exit_code == ExitCode.OK, res.output
    doc = json.loads(res.output)
    assert [(s["name"], s["mode"]) for s in doc["services"]] == [("chat", "solo"), ("coder", "solo")]
    assert {n["node"]: n["used_gib"] for n in doc["nodes"]} == {"spark1": 80.8, "spark2": 36.0}


def test_plan_of_a_fleet_over_a_node_exits_2_with_the_sums_and_a_fix(tmp_path: Path) -> None:
    over = tmp_path / "over.yaml"
    over.write_text(SPARKS.read_text().replace("gpu-memory-utilization: 0.25", "gpu-memory-utilization: 0.5"))
    res = plan("-p", str(over))
    assert res.exit_code == ExitCode.USAGE, res.output
    text = " ".join(res.output.split())
    assert "error [node spark2] the services' memory does not fit: chat 80.8 + coder 68.0 = 148.8" in text
    assert "fix: set models.chat.engine.args.mem-fraction-static" in text


def test_an_unknown_service_in_the_selection_exits_2() -> None:
    res = plan("nope:solo", "-p", str(SPARKS))
    assert res.exit_code == ExitCode.USAGE and "unknown service 'nope'" in res.output
