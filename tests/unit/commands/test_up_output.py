"""What `up` prints: state changes as plain lines off a terminal, the ranks' logs on a failure, the closing lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkctl.commands.up_output import Reporter, curl_example, print_rank_logs, print_up
from sparkctl.lifecycle.steps import UpResult
from sparkctl.lifecycle.watch import RankFailedError, RankLog, RankView, WaitProgress
from sparkctl.planning.build import build_plan
from sparkctl.profile import load_profile_file
from sparkctl.runtime.readiness import EndpointHealth

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def plan(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HOME", "/home/spark")
    return build_plan(load_profile_file(ROOT / "profiles" / "dual-spark.yaml"), "tp2")


def test_off_a_terminal_only_state_changes_are_printed(capsys: pytest.CaptureFixture[str]) -> None:
    reporter = Reporter(stderr=False)
    health = EndpointHealth(False, [], False, "starting")
    for status in ("starting", "starting", "running"):
        reporter.update(WaitProgress(1.0, 9.0, [RankView(0, "spark1", "c0", status)], health))
    reporter.close()
    lines = [line.split("s ", 1)[1] for line in capsys.readouterr().out.splitlines()]
    assert lines == ["rank 0 on spark1: starting", "rank 0 on spark1: running"]


def test_a_failed_rank_prints_its_last_log_lines_and_the_router_by_name(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logs = [RankLog(1, "spark2", ["boom [x]"]), RankLog(-1, "spark1", [])]
    print_rank_logs(RankFailedError("rank 1 exited", node="spark2", rank=1, logs=logs))
    err = capsys.readouterr().err
    assert "--- rank 1 on spark2: last 1 log line(s) ---" in err and "boom [x]" in err
    assert "--- the router on spark1: last 0 log line(s) ---" in err


def test_ready_names_the_mode_its_ranks_and_a_curl_without_the_key(
    plan, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARKCTL_API_KEY", "sk-never-printed")
    print_up(UpResult(plan, "started", EndpointHealth(True, [], True, "ready")), 42.0, None)
    out = capsys.readouterr().out
    assert "ready in 42.0s: mode tp2, tp=2 (rank 0@spark1, rank 1@spark2)" in out
    assert curl_example(plan) in out.replace("\n", "") and "sk-never-printed" not in out
