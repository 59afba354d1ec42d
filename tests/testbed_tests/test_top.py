"""`sparkctl top` on the real testbed: stand-in engine /metrics (SGLang 0.5.23 names), real sshd/dockerd."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparkctl.profile import load_profile_file
from tests.testbed.profiles import seed_weights, write_lab_profile
from tests.testbed_tests.conftest import SOLO, TP2, cli, cluster_containers

pytestmark = pytest.mark.testbed


@pytest.fixture
def metrics_profile(lab, tmp_path):
    """A lab profile whose engine exports /metrics; the cluster is taken down after the test."""
    seed_weights(lab)
    state = tmp_path / "state"
    path = write_lab_profile(
        lab,
        tmp_path / "sparkctl.yaml",
        modes={"solo": dict(SOLO), "tp2": dict(TP2)},
        engine={"args": {"context-length": 4096, "enable-metrics": True}},
    )
    yield path, state
    lab.start_sshd("spark2")
    cli(state, path, "down")
    assert not any(cluster_containers(lab, load_profile_file(path).cluster).values())


def top_json(state: Path, path: Path) -> tuple[int, dict]:
    res = cli(state, path, "top", "--once", "--json", "--interval", "1")
    assert res.stdout, res.stderr
    return res.returncode, json.loads(res.stdout)


def live_screen_refreshes(state: Path, path: Path) -> None:
    """`top` on a terminal (a pty, 80 columns) redraws its screen every interval; Ctrl-C exits 0."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: exec at once
        os.environ.update(XDG_STATE_HOME=str(state), COLUMNS="80", LINES="40", TERM="xterm")
        os.execv(sys.executable, [sys.executable, "-m", "sparkctl", "top", "-i", "0.5", "-p", str(path)])
    out, deadline = b"", time.monotonic() + 90
    try:
        while out.count(b"sparkctl top") < 3 and time.monotonic() < deadline:
            if select.select([fd], [], [], 0.5)[0]:
                out += os.read(fd, 65536)
    finally:
        os.kill(pid, signal.SIGINT)
        while True:  # drain until the child closes the pty, then reap it
            try:
                if not select.select([fd], [], [], 30)[0] or not os.read(fd, 65536):
                    break
            except OSError:
                break
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert out.count(b"sparkctl top") >= 3, out.decode(errors="replace")[-2000:]
    plain = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b"", out)  # colours and cursor moves off
    assert b"0    spark1 running" in plain and b"no warnings" in plain
    assert os.waitstatus_to_exitcode(status) == 0


def node_comes_back(lab, path: Path) -> None:
    """A live `top` (one Collector) shows spark2 degraded while its sshd is gone, then recovers."""
    from sparkctl.connectors import NodePool
    from sparkctl.top.snapshot import Collector

    prof = load_profile_file(path)
    with NodePool(prof) as pool:
        collector = Collector(prof, pool)
        assert all(n.error is None for n in collector.sample().nodes)
        lab.stop_sshd("spark2", kill_sessions=True)
        down = collector.sample()
        assert [n.node for n in down.nodes if n.error] == ["spark2"] and down.ranks[1].state == "unknown"
        lab.start_sshd("spark2")
        back = collector.sample()
        assert all(n.error is None for n in back.nodes) and back.ranks[1].state == "running"


def test_top_once_json_screen_missing_rank_and_unreachable_node(lab, metrics_profile):
    path, state = metrics_profile
    up = cli(state, path, "up", "tp2")
    assert up.returncode == 0, up.stderr

    rc, snap = top_json(state, path)
    assert rc == 0, snap
    assert snap["mode"] == "tp2" and 0.9 <= snap["interval_s"] < 30
    assert [(r["rank"], r["node"], r["state"]) for r in snap["ranks"]] == [
        (0, "spark1", "running"),
        (1, "spark2", "running"),
    ]
    (eng,) = snap["engines"]
    assert eng["error"] is None and eng["url"].endswith(":30000/metrics")
    # The stand-in's gauges (launch_server.METRIC_DEFAULTS) and its counters' rates
    assert (eng["running"], eng["queued"], eng["token_usage"]) == (4, 1, 0.42)
    assert (eng["accept_length"], eng["accept_rate"]) == (3.2, 0.55)
    assert eng["gen_tok_s"] == pytest.approx(250, rel=0.2) and eng["prompt_tok_s"] == pytest.approx(
        1000, rel=0.2
    )
    assert 0.1 <= eng["ttft_s"]["p50"] <= 0.6 and 0.008 <= eng["itl_s"]["p50"] <= 0.02
    for node in snap["nodes"]:
        assert node["error"] is None
        assert "nvidia-smi not found" in node["gpu_error"] and node["gpus"] == []  # degraded cell, no crash
        assert node["mem_available_mib"] > 0
        (rates,) = node["fabric"].values()
        assert rates["rx_bytes_s"] is not None and rates["rx_bytes_s"] >= 0
    assert snap["warnings"] == []

    # The metrics change over time: counters advance between two runs.
    _, later = top_json(state, path)
    assert later["engines"][0]["requests_total"] > eng["requests_total"]

    # The screen at 80 columns
    env = {**os.environ, "XDG_STATE_HOME": str(state), "COLUMNS": "80"}
    res = subprocess.run(
        [sys.executable, "-m", "sparkctl", "top", "--once", "--interval", "0.5", "-p", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert max(len(x) for x in lines) <= 80, res.stdout
    assert any(x.startswith("0    spark1 running") for x in lines), res.stdout
    assert "spark1 GPU n/a: nvidia-smi not found on the node" in res.stdout and "run 4  queue 1" in res.stdout

    live_screen_refreshes(state, path)

    # An unreachable node: a degraded row, exit 5, the rest still shown
    lab.stop_sshd("spark2", kill_sessions=True)
    rc, snap = top_json(state, path)
    assert rc == 5
    spark2 = next(n for n in snap["nodes"] if n["node"] == "spark2")
    assert (
        spark2["error"] and snap["ranks"][1]["state"] == "unknown" and snap["ranks"][0]["state"] == "running"
    )
    assert snap["engines"][0]["error"] is None
    assert ("NodeDegraded", "spark2") in [(w["code"], w["where"]) for w in snap["warnings"]]
    lab.start_sshd("spark2")
    node_comes_back(lab, path)

    # A stopped rank shows as missing
    lab.kill_container("spark2", snap["ranks"][1]["container"])
    rc, snap = top_json(state, path)
    assert rc == 0
    assert snap["ranks"][1]["state"] == "missing" and "exited" in snap["ranks"][1]["detail"]
    assert ("RankMissing", "rank 1 (spark2)") in [(w["code"], w["where"]) for w in snap["warnings"]]


def test_top_warnings_from_the_engine(lab, metrics_profile, tmp_path):
    """The stand-in reports a full KV cache, a collapsing draft and a queue that grows per scrape:
    a live `top` (one Collector, several refreshes) warns about each, with its numbers."""
    from sparkctl.connectors import NodePool
    from sparkctl.top.snapshot import Collector

    _, state = metrics_profile
    solo = {**SOLO, "env": {"STANDIN_METRICS": "token_usage=0.97,accept_rate=0.05,queue_step=2"}}
    path = write_lab_profile(
        lab,
        tmp_path / "warn.yaml",
        modes={"solo": solo, "tp2": dict(TP2)},
        engine={"args": {"context-length": 4096, "enable-metrics": True}},
    )
    try:
        up = cli(state, path, "up", "solo")
        assert up.returncode == 0, up.stderr
        prof = load_profile_file(path)
        with NodePool(prof) as pool:
            collector = Collector(prof, pool)
            snaps = [collector.sample() for _ in range(4)]
        queued = [s.engines[0].stats.queued for s in snaps]
        assert all(b > a for a, b in zip(queued, queued[1:], strict=False)), queued
        codes = {w.code: w.reason for w in snaps[-1].alerts}
        assert set(codes) == {"QueueGrowing", "KvCacheFull", "AcceptanceCollapsed"}, codes
        assert (
            "KV cache 97% full" in codes["KvCacheFull"]
            and "acceptance rate 5%" in codes["AcceptanceCollapsed"]
        )
        assert {w.code for w in snaps[0].alerts} == {"KvCacheFull", "AcceptanceCollapsed"}  # no history yet
    finally:
        cli(state, path, "down")
