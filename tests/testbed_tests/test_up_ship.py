"""`up` stops on weights a node lacks, and `up --ship` ships them and goes on."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.testbed.profiles import DRAFT_ID, TARGET_ID
from tests.testbed_tests.conftest import cli

pytestmark = pytest.mark.testbed


def test_up_offers_ship_for_missing_weights(lab, setup):
    write_profile, state = setup
    path = write_profile()
    hub2 = Path(lab.node("spark2").node_root, "hf", "hub")
    shutil.rmtree(hub2)

    res = cli(state, path, "up", "tp2", "--no-ship")
    assert res.returncode == 1, res.stderr
    assert "[Weights-spark2]" in res.stderr and re.search(r"sparkctl (-p \S+ )?ship", res.stderr)
    assert not hub2.exists()  # --no-ship changed nothing

    res = cli(state, path, "up", "tp2", "--ship", "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["health"]["ready"]
    hub1 = Path(lab.node("spark1").node_root, "hf", "hub")
    shards = [
        s
        for m in (TARGET_ID, DRAFT_ID)
        for s in hub1.glob(f"models--{m.replace('/', '--')}/snapshots/*/model.safetensors")
    ]
    assert len(shards) == 2
    for shard in shards:
        assert (hub2 / shard.relative_to(hub1)).read_bytes() == shard.read_bytes()


def test_up_ship_ready_in_counts_from_the_start(lab, setup):
    """One deadline and one clock: `ready in` is read from the command's start, shipping included."""
    import re

    write_profile, state = setup
    path = write_profile()
    shutil.rmtree(Path(lab.node("spark2").node_root, "hf", "hub"))
    res = cli(state, path, "up", "tp2", "--ship")
    assert res.returncode == 0, res.stdout + res.stderr
    stamps = [float(x) for x in re.findall(r"^\s*(\d+\.\d)s ", res.stdout, re.M)]
    assert any("shipping" in line for line in res.stdout.splitlines())
    ready = float(re.search(r"ready in (\d+\.\d)s", res.stdout).group(1))
    assert stamps and ready >= max(stamps), res.stdout  # not the retry's own clock
