"""`bench` and `verify` through the proxy's stream faults (tests/server/proxy.py) in front of the
real `transformers serve`: a buffered stream gives no per-stream rate, a slow healthy stream
passes the defaults, a timeout names the limit that fired, repeated deltas and a cut stream are
named as such; and a run never throws away what finished (default suite on a server without
reasoning, a named workload that cannot run, a --budget too short for any repetition)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "80"}
    return subprocess.run(
        [sys.executable, "-m", "sparkctl", *args], capture_output=True, text=True, timeout=300, env=env
    )


def _endpoint(proxy, server, *mutations: str) -> list[str]:
    return ["--url", proxy.base(*mutations), "--model", server.model]


def test_buffered_stream_has_no_per_stream_rate(server, proxy) -> None:
    at = _endpoint(proxy, server, "buffered")
    proc = _cli("bench", *at, "-w", "code", "--reps", "2", "--max-tokens", "16", "--json")
    assert proc.returncode == 0, proc.stderr
    (code,) = json.loads(proc.stdout)["workloads"]
    assert code["stats"]["decode_tps"] is None and code["stats"]["itl_s"] is None
    assert code["burst_streams"] == 2 == len(code["samples"])
    assert all("arrived in one burst" in s["burst"] for s in code["samples"])
    assert code["stats"]["aggregate_tps"]["p50"] > 0  # throughput stays: it is wall-clock based
    table = _cli("bench", *at, "-w", "code", "--reps", "1", "--max-tokens", "16")
    assert table.returncode == 0, table.stderr
    assert "burst" in table.stdout and "not measurable for 1 of 1 streams" in " ".join(table.stdout.split())
    # positive control: the same stream, not buffered, has a rate
    plain = _cli(
        "bench", *_endpoint(proxy, server), "-w", "code", "--reps", "2", "--max-tokens", "16", "--json"
    )
    (code,) = json.loads(plain.stdout)["workloads"]
    assert code["burst_streams"] == 0 and code["stats"]["decode_tps"]["p50"] > 0


def test_slow_healthy_stream_passes_the_defaults_and_timeouts_name_themselves(server, proxy) -> None:
    at = _endpoint(proxy, server, "drip")  # DRIP_S between events, a few seconds in all
    # --timeout is the whole-request limit, and says so: not "stalled"
    whole = _cli("verify", *at, "--only", "ChatStream", "--timeout", "1")
    assert whole.returncode == 3, whole.stdout + whole.stderr
    text = " ".join(whole.stderr.split())
    assert "ran past --timeout 1s (the whole-request limit)" in text and "stall" not in text.split("fix:")[0]
    ok = _cli("verify", *at, "--only", "ChatStream")
    assert ok.returncode == 0 and "pass ChatStream" in ok.stdout, ok.stdout + ok.stderr
    bench = _cli("bench", *at, "-w", "code", "--reps", "1", "--max-tokens", "8", "--json")
    assert bench.returncode == 0, bench.stderr
    (code,) = json.loads(bench.stdout)["workloads"]
    assert code["burst_streams"] == 0 and code["stats"]["decode_tps"]["p50"] > 0
    stall = _cli("bench", *at, "-w", "code", "--reps", "1", "--max-tokens", "8", "--stall-timeout", "0.1")
    assert stall.returncode == 3, stall.stderr
    assert "the stream stalled: no event for --stall-timeout 0.1s" in " ".join(stall.stderr.split())


def test_repeated_deltas_are_an_error(server, proxy) -> None:
    proc = _cli(
        "bench", *_endpoint(proxy, server, "duplicated"), "-w", "code", "--reps", "1", "--max-tokens", "8"
    )
    assert proc.returncode == 3, proc.stderr
    assert "the stream repeats deltas" in " ".join(proc.stderr.split()) and "Traceback" not in proc.stderr


def test_a_cut_stream_is_named_with_its_own_fix(server, proxy) -> None:
    at = _endpoint(proxy, server, "cut")
    verify = _cli("verify", *at, "--only", "ChatStream")
    assert verify.returncode == 1, verify.stdout + verify.stderr
    out = " ".join(verify.stdout.split())
    assert "FAIL ChatStream the stream was cut mid-way after" in out and "cannot connect" not in out
    assert "closed the stream before its end" in out
    bench = _cli("bench", *at, "-w", "code", "--reps", "1", "--max-tokens", "8")
    assert bench.returncode == 3, bench.stderr
    err = " ".join(bench.stderr.split())
    assert "workload code: the stream was cut mid-way after" in err and "cannot connect" not in err
    assert "fix: the server (or a proxy on the way) closed the stream before its end" in err


def test_default_suite_skips_thinking_with_a_warning_and_keeps_the_rest(server, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    at = ["--url", server.url, "--model", server.model]
    small = ["--reps", "1", "--max-tokens", "4", "--prefix-words", "100", "--concurrency", "1"]
    proc = _cli("bench", *at, *small, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    err = " ".join(proc.stdout.split())  # progress, notes and warnings go to the console
    assert "warning: thinking skipped: thinking was on but the reply carries no reasoning" in err
    assert "context 8192 tokens (assumed: the server does not report it; --context N)" in err
    for name in ("code", "prose", "prefill", "long-prefix"):
        assert f"\n {name} " in proc.stdout or f"\n{name} " in proc.stdout, (name, proc.stdout)
    data = json.loads(out.read_text())
    assert [w["name"] for w in data["workloads"]] == ["code", "prose", "prefill", "long-prefix"]
    assert [s["name"] for s in data["skipped"]] == ["thinking"] and data["context_source"] == "assumed"


def test_a_stop_keeps_every_finished_workload(server, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    at = ["--url", server.url, "--model", server.model, "--reps", "1", "--max-tokens", "4"]
    # asked for by name, thinking is an error: the finished `code` is still reported
    proc = _cli("bench", *at, "-w", "code", "-w", "thinking", "--out", str(out))
    assert proc.returncode == 3, proc.stderr
    assert "\n code " in proc.stdout and "thinking was on but the reply carries no reasoning" in proc.stderr
    data = json.loads(out.read_text())
    assert [w["name"] for w in data["workloads"]] == ["code"] and data["error"]["code"] == 3
    as_json = _cli("bench", *at, "-w", "code", "-w", "thinking", "--json")
    doc = json.loads(as_json.stdout)
    assert as_json.returncode == 3 and [w["name"] for w in doc["workloads"]] == ["code"]
    assert "no reasoning" in doc["error"]["message"]
    # a budget that ends before any repetition: an error with the reason, not a table of dashes
    budget = _cli("bench", *at, "-w", "code", "--budget", "0")
    assert budget.returncode == 3, budget.stdout + budget.stderr
    assert "--budget 0s ended before any repetition ran" in " ".join(budget.stderr.split())
