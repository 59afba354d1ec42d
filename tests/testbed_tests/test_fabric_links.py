"""`fabric-test --links` on the testbed: the layout read from both nodes (real `ip`, link-local
neighbours), the one cable tested pair-wise with gloo on its own netdev and address, then the group."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.testbed.lab import Lab
from tests.testbed.profiles import write_lab_profile
from tests.testbed_tests.test_fabric_gloo import torch_lab  # noqa: F401 - the fixture
from tests.testbed_tests.torch_image import TORCH_TAG

pytestmark = pytest.mark.testbed


def test_links_then_group_over_gloo(torch_lab: Lab, tmp_path) -> None:  # noqa: F811
    path = write_lab_profile(torch_lab, tmp_path / "lab.yaml", image=TORCH_TAG)
    argv = [sys.executable, "-m", "sparkctl", "fabric-test", "tp2", "-p", str(path), "--links"]
    argv += ["--backend", "gloo", "--sizes", "64K", "--iters", "2", "--timeout", "60"]
    res = subprocess.run([*argv, "--json"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    spark1 = torch_lab.node("spark1")
    subnet = spark1.fabric_ip.rsplit(".", 1)[0] + ".0/24"
    (link,) = out["links"]
    assert link["link"] == f"spark1 port 1 <-> spark2 port 1 ({subnet})"
    assert link["severity"] == "ok" and [r["phase"] for r in link["ranks"]] == ["done", "done"]
    assert out["group"]["severity"] == "ok" and len(out["group"]["ranks"]) == 2
    text = subprocess.run(
        argv, capture_output=True, text=True, timeout=600, env={**os.environ, "COLUMNS": "200"}
    )
    assert text.returncode == 0, text.stderr
    assert f"link spark1 port 1 <-> spark2 port 1 ({subnet}): all_gather" in text.stdout
