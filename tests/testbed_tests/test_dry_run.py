"""`up/switch/down --dry-run` say what would happen and change nothing on any node."""

from __future__ import annotations

import json

import pytest

from sparkctl.profile import load_profile_file
from tests.testbed_tests.conftest import cli, cluster_containers

pytestmark = pytest.mark.testbed


def ids(lab, cluster: str) -> set[str]:
    return {c.id for cs in cluster_containers(lab, cluster).values() for c in cs}


def test_dry_runs_change_nothing(lab, setup):
    write_profile, state = setup
    path = write_profile()
    cluster = load_profile_file(path).cluster

    res = cli(state, path, "up", "tp2", "--dry-run", "--json")
    assert res.returncode == 0, res.stderr
    pre = json.loads(res.stdout)
    assert not pre["noop"] and pre["stop"] == []
    assert [(s["rank"], s["node"]) for s in pre["start"]] == [(1, "spark2"), (0, "spark1")]
    assert ids(lab, cluster) == set()

    assert cli(state, path, "up", "solo").returncode == 0
    before = ids(lab, cluster)
    res = cli(state, path, "switch", "tp2", "--dry-run")
    assert res.returncode == 0, res.stderr
    assert f"would stop sparkctl-{cluster}-solo-r0 on spark1" in res.stdout
    assert "would start rank 1 on spark2" in res.stdout and "would start rank 0 on spark1" in res.stdout
    res = cli(state, path, "up", "solo", "--dry-run")
    assert "would change nothing" in res.stdout
    res = cli(state, path, "down", "--dry-run", "--json")
    rank0 = f"sparkctl-{cluster}-solo-r0"  # and its gateway, removed with it
    assert sorted(c["name"] for c in json.loads(res.stdout)["removed"]) == [rank0, f"{rank0}-gateway"]
    assert ids(lab, cluster) == before  # nothing was stopped, started or removed
