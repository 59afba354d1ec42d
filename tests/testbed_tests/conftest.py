"""Shared helpers for testbed tests that drive the real `sparkctl` CLI against the lab."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparkctl.profile import load_profile_file
from tests.testbed.loadgen import LoadGen, LoadStats
from tests.testbed.profiles import seed_weights, write_lab_profile

SOLO = {"nodes": ["spark1"], "tp": 1, "default": True}
TP2 = {"nodes": ["spark1", "spark2"], "tp": 2}


def cli(state: Path, profile: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_STATE_HOME": str(state), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "sparkctl", *args, "-p", str(profile)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def cluster_containers(lab, cluster: str, gateways: bool = True) -> dict[str, list]:
    """The cluster's containers per node; `gateways=False`: the ranks and the router only (each
    gateway is removed with what it serves: tests/testbed_tests/test_security.py)."""
    found = {
        n.name: lab.docker(n).containers.list(all=True, filters={"label": f"sparkctl.cluster={cluster}"})
        for n in lab.nodes
    }
    if gateways:
        return found
    return {n: [c for c in cs if c.labels.get("sparkctl.role") != "gateway"] for n, cs in found.items()}


def engine_containers(lab, node: str, label: str) -> list:
    """The running containers on `node` with `label` that are not gateways (ranks, router)."""
    found = lab.docker(node).containers.list(filters={"label": label})
    return [c for c in found if c.labels.get("sparkctl.role") != "gateway"]


def standin_record(lab, node: str, name: str) -> dict:
    rc, out = lab.docker(node).containers.get(name).exec_run(["cat", "/tmp/standin-record.json"])
    assert rc == 0, out
    return json.loads(out)


@pytest.fixture
def setup(lab, tmp_path):
    """(profile writer, state dir); every cluster container is removed after the test."""
    state = tmp_path / "state"
    written: list[Path] = []
    seed_weights(lab)  # `up` checks the weights are on every node before it starts anything

    def profile(name: str = "sparkctl.yaml", **modes_env: dict) -> Path:
        modes = {"solo": dict(SOLO), "tp2": dict(TP2)}
        for mode, env in modes_env.items():
            modes[mode]["env"] = env
        path = write_lab_profile(lab, tmp_path / name, modes=modes)
        written.append(path)
        return path

    yield profile, state
    if written:
        cli(state, written[0], "down")
    cluster = load_profile_file(written[0]).cluster if written else None
    if cluster:
        assert not any(cluster_containers(lab, cluster).values())


def pytest_terminal_summary(terminalreporter) -> None:  # noqa: ANN001 - pytest's TerminalReporter
    """Figures a test reported (user property "figure", e.g. failed requests under load), shown
    in the summary whether or not output was captured."""
    lines = [
        value
        for reports in terminalreporter.stats.values()
        for rep in reports
        for key, value in getattr(rep, "user_properties", [])
        if key == "figure" and getattr(rep, "when", "call") == "call"
    ]
    if lines:
        terminalreporter.section("testbed figures")
        for line in lines:
            terminalreporter.write_line(line)


def report(request: pytest.FixtureRequest, line: str) -> None:
    """Printed now (-s) and in the run's summary (testbed_tests/conftest.py), whatever the flags."""
    print(line)
    request.node.user_properties.append(("figure", line))


def rolled_under_load(state: Path, path: Path, url: str, *args: str) -> tuple[dict, LoadStats]:
    with LoadGen(url, model="tiny-test", threads=8, stream=True) as load:
        load.wait_for(8)  # requests flowing through the router before the switch
        res = cli(state, path, *args, "--json")
        assert res.returncode == 0, res.stderr
        load.wait_for(8)  # and still after it
    return json.loads(res.stdout), load.stats
