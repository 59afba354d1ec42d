"""Golden CLI output at 80 and 120 columns and piped (tests/golden/cli/): what a user reads.

Each case renders fixed data through the real renderers (a recorded 2-node preflight report,
findings with long fixes, a bench result, `--help`); no timing or host detail gets in. Piped
means not a terminal: no colour, rich's default width. Rewrite with UPDATE_GOLDEN=1 and review
the diff.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console

from sparkctl.findings import Finding, Severity

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "cli"
E, W, OK, SKIP = Severity.ERROR, Severity.WARN, Severity.OK, Severity.SKIP
WIDTHS = {"80": 80, "120": 120, "piped": None}
LONG_FIX = (
    "`HF_HOME=/home/spark/.cache/huggingface huggingface-cli download Qwen/Qwen3.6-27B-NVFP4 "
    "--revision main` on spark2, then rerun preflight"
)


def two_node_report():  # preflight Report
    """The shape of a real 2-node run (tests/testbed): passes, skips, a warning, two errors."""
    from sparkctl.preflight.runner import Report

    findings = [
        Finding("SshReachable", OK, "root@10.231.2.2:22 (0.05s)", node=n) for n in ("spark1", "spark2")
    ]
    findings += [
        Finding(
            "Mtu",
            E,
            "enp1s0f1np1 has MTU 1500, the profile says 9000",
            node="spark2",
            fix="on spark2: `sudo ip link set dev enp1s0f1np1 mtu 9000` and persist it in netplan "
            "(`mtu: 9000` under the interface, then `sudo netplan apply`)",
        ),
        Finding("PingDf", OK, "spark1 -> spark2 (10.232.2.2) 8972 B DF: 2/2 replies", node="spark1"),
        Finding(
            "Weights",
            E,
            "target Qwen/Qwen3.6-27B-NVFP4@main: not in the cache under /home/spark/.cache/huggingface",
            node="spark2",
            fix="no node has it, download it: " + LONG_FIX,
        ),
        Finding(
            "DiskFree",
            W,
            "/home/spark/.cache/huggingface has 41.2 GiB free, the model needs 45.0 GiB",
            node="spark2",
            fix="free space or point model.hf_cache at a larger disk",
        ),
        Finding("MemoryFit", SKIP, "memory not planned: no GPU facts", fix="set nodes[].gpu in the profile"),
        Finding("DockerEngine", OK, "Docker 27.5.1, runtime nvidia", node="spark1"),
    ]
    return Report("sparkduo", "tp2", ["spark1", "spark2"], findings, elapsed_s=2.5)


def bench_result():  # BenchResult
    from sparkctl.benchmark.measure import Sample
    from sparkctl.benchmark.results import BenchResult, WorkloadResult
    from sparkctl.benchmark.workloads import default_suite

    results = []
    for i, w in enumerate(default_suite()[:3]):
        samples = [
            Sample(
                w.name,
                rep,
                0,
                900 + 10 * i,
                256,
                512 if i == 2 else None,
                0.2 + 0.01 * rep,
                5.0 + 0.1 * rep,
                250,
                "length",
            )
            for rep in range(3)
        ]
        results.append(WorkloadResult(w, samples, [5.0, 5.1, 5.2]))
    return BenchResult(
        "http://192.168.100.10:8888/v1",
        "qwen3.6-27b",
        "tp2",
        "fb56d0015eca",
        3,
        "2026-01-01T00:00:00+00:00",
        results,
    )


def render_preflight(out: Console) -> None:
    from sparkctl.commands.preflight import render_report

    render_report(two_node_report(), out=out)


def render_preflight_verbose(out: Console) -> None:
    from sparkctl.commands.preflight import render_report

    render_report(two_node_report(), verbose=True, out=out)


def render_findings_list(out: Console) -> None:
    from sparkctl.commands._findings import render_findings

    render_findings(two_node_report().findings, out=out)


def render_bench(out: Console) -> None:
    from sparkctl.benchmark.report import bench_table

    out.print(bench_table(bench_result()))


CASES: dict[str, Callable[[Console], None]] = {
    "preflight": render_preflight,
    "preflight-v": render_preflight_verbose,
    "findings": render_findings_list,
    "bench": render_bench,
}


def render(case: str, width: int | None) -> str:
    buf = io.StringIO()
    out = Console(
        file=buf,
        width=width or 80,
        force_terminal=False,
        color_system=None,
        highlight=False,
        soft_wrap=False,
        _environ={},
    )
    CASES[case](out)
    return buf.getvalue()


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.is_file(), f"no golden {path}: run with UPDATE_GOLDEN=1 and review it"
    assert text == path.read_text(), f"{name} differs from its golden (UPDATE_GOLDEN=1 rewrites it)"


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("case", CASES)
def test_golden(case: str, width: str) -> None:
    text = render(case, WIDTHS[width])
    check_golden(f"{case}-{width}.txt", text)
    limit = WIDTHS[width] or 80
    long = [line for line in text.splitlines() if len(line) > limit and "`" not in line]
    assert not long, long  # only a command too long for any line may run past the width
    assert "…" not in text  # nothing cut: cells wrap instead


@pytest.mark.parametrize("width", ["80", "120"])
@pytest.mark.parametrize("command", ["init", "preflight", "up", "bench", "fabric-test", "logs"])
def test_help_fits(command: str, width: str) -> None:
    """Flag names never cut, no line past the width."""
    from typer.testing import CliRunner

    from sparkctl.cli import app

    res = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": width, "TERM": "dumb"})
    assert res.exit_code == 0, res.output
    check_golden(f"help-{command}-{width}.txt", res.output)
    assert all(len(line) <= int(width) for line in res.output.splitlines()), res.output
    assert "…" not in res.output
