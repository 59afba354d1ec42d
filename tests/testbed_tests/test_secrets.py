"""HF_TOKEN reaches the container and nothing else: not plans, output, logs or any command line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from tests.testbed_tests.conftest import cli

pytestmark = pytest.mark.testbed
TOKEN = "hf_sparkctl_test_secret_0123456789"


def test_secret_only_reaches_the_container(lab, setup, monkeypatch):
    write_profile, state = setup
    path = write_profile()
    doc = yaml.safe_load(path.read_text())
    doc["engine"]["secrets"] = {"HF_TOKEN": {"env": "SPARKCTL_TEST_HF_TOKEN"}}
    doc["engine"]["env"] = {"STANDIN_LEAK_ENV": "HF_TOKEN"}  # the engine prints its token: redact it
    path.write_text(yaml.safe_dump(doc))
    monkeypatch.setenv("SPARKCTL_TEST_HF_TOKEN", TOKEN)
    assert os.environ["SPARKCTL_TEST_HF_TOKEN"] == TOKEN  # cli() passes os.environ on

    outputs = [cli(state, path, "plan", "tp2", "--json"), cli(state, path, "up", "tp2", "--json")]
    assert outputs[-1].returncode == 0, outputs[-1].stderr
    outputs += [cli(state, path, "status", "--json"), cli(state, path, "logs", "--tail", "200")]
    for res in outputs:
        assert TOKEN not in res.stdout + res.stderr
    assert json.loads(outputs[0].stdout)["ranks"][0]["env"]["HF_TOKEN"].startswith("***")

    cluster = doc["cluster"]
    for node in ("spark1", "spark2"):
        rank = 0 if node == "spark1" else 1
        container = lab.docker(node).containers.get(f"sparkctl-{cluster}-tp2-r{rank}")
        assert f"HF_TOKEN={TOKEN}" in container.attrs["Config"]["Env"]  # it did arrive
        cmdlines = lab.exec(node, ["sh", "-c", "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '"]).stdout
        assert TOKEN not in cmdlines
    # The engine did print it (the node's raw log file has it); sparkctl's `logs` showed it masked.
    logs_dir = Path(lab.node("spark1").node_root, "logs")
    assert any(f"HF_TOKEN={TOKEN}" in p.read_text() for p in logs_dir.iterdir())
    assert "STANDIN: HF_TOKEN=***" in outputs[-1].stdout
