"""`bench --compare solo tp2` drives the real lifecycle: run, switch (up), run, side by side."""

from __future__ import annotations

import json

import pytest

from sparkctl.profile import load_profile_file
from tests.testbed_tests.conftest import cli, cluster_containers

pytestmark = pytest.mark.testbed


def test_bench_compare_switches_modes_between_runs(lab, setup, tmp_path):
    write_profile, state = setup
    path = write_profile()
    out, chart = tmp_path / "compare.json", tmp_path / "compare.png"
    res = cli(
        state,
        path,
        "bench",
        "--compare",
        "solo",
        "tp2",
        "-w",
        "code",
        "--reps",
        "2",
        "--max-tokens",
        "16",
        "--out",
        str(out),
        "--chart",
        str(chart),
        "--json",
        timeout=600,
    )
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data == json.loads(out.read_text())
    assert chart.read_bytes()[:4] == b"\x89PNG"  # both modes drawn on one chart
    a, b = data["compare"]
    assert (a["mode"], b["mode"]) == ("solo", "tp2")
    assert a["config_hash"] != b["config_hash"]
    for result in (a, b):
        (code,) = result["workloads"]
        # The stand-in's usage says 9 completion tokens per request: counted from usage, not chunks.
        assert [s["completion_tokens"] for s in code["samples"]] == [9, 9]
    # The switch really happened: tp2 runs now, solo is gone.
    cluster = load_profile_file(path).cluster
    running = {c.labels["sparkctl.mode"] for cs in cluster_containers(lab, cluster).values() for c in cs}
    assert running == {"tp2"}
