"""`up` stops on weights a node lacks, and `up --ship` ships them and goes on."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.testbed_tests.conftest import cli

pytestmark = pytest.mark.testbed


def test_up_offers_ship_for_missing_weights(lab, setup):
    write_profile, state = setup
    path = write_profile()
    hub2 = Path(lab.node("spark2").node_root, "hf", "hub")
    shutil.rmtree(hub2)

    res = cli(state, path, "up", "tp2", "--no-ship")
    assert res.returncode == 1, res.stderr
    assert "[Weights-spark2]" in res.stderr and "sparkctl ship" in res.stderr
    assert not hub2.exists()  # --no-ship changed nothing

    res = cli(state, path, "up", "tp2", "--ship", "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["health"]["ready"]
    hub1 = Path(lab.node("spark1").node_root, "hf", "hub")
    for shard in hub1.glob("models--*/snapshots/*/model.safetensors"):
        assert (hub2 / shard.relative_to(hub1)).read_bytes() == shard.read_bytes()
