"""nvidia-smi --query-gpu parsing for `top` on the H200 / GB10 fixtures; meminfo and netdev counters."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkctl.connectors.local import LocalConnector
from sparkctl.facts.gpu import ProbeParseError, parse_meminfo
from sparkctl.top.alerts import throttling
from sparkctl.top.nodes import (
    GPU_ARGV,
    TOP_FIELDS,
    NodeSample,
    net_argv,
    net_rates,
    parse_gpu_stats,
    parse_net,
    read_node,
)

GPU = Path(__file__).parents[2] / "fixtures" / "gpu"


def test_h200_idle_captured():
    (g,) = parse_gpu_stats((GPU / "h200" / "top-query-idle.csv").read_text())
    assert (g.index, g.name, g.util_pct, g.mem_used_mib, g.mem_total_mib) == (0, "NVIDIA H200", 0, 0, 143771)
    assert (g.temp_c, g.power_w, g.power_limit_w) == (33, pytest.approx(99.22), 700)
    assert (g.sm_clock_mhz, g.sm_clock_max_mhz, g.throttle_mask) == (345, 1980, 1)
    assert g.throttles == []  # 0x1 = idle: not throttling
    assert throttling(g) is None


def test_h200_busy_captured_is_power_capped():
    (g,) = parse_gpu_stats((GPU / "h200" / "top-query-busy.csv").read_text())
    assert (g.util_pct, g.mem_used_mib, g.temp_c) == (100, 1011, 54)
    assert (g.power_w, g.sm_clock_mhz, g.throttle_mask) == (pytest.approx(692.18), 1530, 0x4)
    assert g.throttles == ["SW power cap"]
    assert "SW power cap (SM 1530/1980 MHz), 54 C" in (throttling(g) or "")


def test_gb10_query_is_unified():
    (g,) = parse_gpu_stats((GPU / "gb10" / "query-gpu-top.csv").read_text())
    assert g.name == "NVIDIA GB10" and g.mem_total_mib is None and g.mem_used_mib is None
    assert g.power_limit_w is None and g.temp_c == 36
    sample = NodeSample(
        "spark1", 0.0, gpus=[g], meminfo=parse_meminfo((GPU / "gb10" / "meminfo.txt").read_text())
    )
    assert sample.unified_memory and sample.mem_available_mib == 118566368 // 1024
    assert sample.mem_total_mib == 127600748 // 1024


def test_throttle_bits_named():
    line = "0, NVIDIA H200, GPU-x, 100, 40, 140000, 143771, 88, 699.10, 700.00, 1410, 3201, 1980, 0x0000000000000064\n"
    (g,) = parse_gpu_stats(line)  # 0x64 = SW power cap | SW thermal | HW thermal
    assert g.throttles == ["SW power cap", "SW thermal slowdown", "HW thermal slowdown"]


def test_query_fields_match_argv():
    assert (
        GPU_ARGV[1] == "--query-gpu=" + ",".join(TOP_FIELDS)
        and GPU_ARGV[2] == "--format=csv,noheader,nounits"
    )


def test_wrong_field_count_is_a_parse_error():
    with pytest.raises(ProbeParseError):
        parse_gpu_stats((GPU / "gb10" / "query-gpu.csv").read_text())  # preflight's 5-field query


def test_net_counters_and_rates():
    assert net_argv(["eth1"]) == [
        "cat",
        "/sys/class/net/eth1/statistics/rx_bytes",
        "/sys/class/net/eth1/statistics/tx_bytes",
    ]
    before = NodeSample("n", 10.0, net=parse_net("1000\n2000\n", ["eth1"]))
    now = NodeSample("n", 12.0, net=parse_net("5000\n2100\n", ["eth1"]))
    assert net_rates(now, before) == {"eth1": {"rx_bytes_s": 2000.0, "tx_bytes_s": 50.0}}
    assert net_rates(now, None) == {"eth1": {"rx_bytes_s": None, "tx_bytes_s": None}}
    with pytest.raises(ProbeParseError):
        parse_net("1000\n", ["eth1"])


def test_read_node_degrades_cells_not_the_row(tmp_path):
    """On this machine (no GPU): nvidia-smi is missing -> GPU cell error; meminfo and lo still read."""
    sample = read_node(LocalConnector("here"), ["lo", "no-such-netdev0"], 1.0)
    assert sample.meminfo.get("MemAvailable", 0) > 0 and sample.mem_error is None
    assert sample.net == {} and "netdev counters failed" in (sample.net_error or "")
    if not sample.gpus:
        assert "nvidia-smi" in (sample.gpu_error or "")
    ok = read_node(LocalConnector("here"), ["lo"], 2.0)
    assert set(ok.net) == {"lo"} and ok.net_error is None


def test_the_memory_guard_probe_output_parses() -> None:
    import json

    from sparkctl.top.nodes import parse_guard

    state = {"at": 1000.0, "mem_available": 5 << 30}
    trip = {"at": 990.0, "reason": "MemAvailable 3.90 GiB < 6.00 GiB", "killed": [{"name": "r0"}]}
    assert parse_guard(f"true 1005\n{json.dumps(state)}\n{json.dumps(trip)}\n") == {
        "running": True,
        "now": 1005.0,
        "state": state,
        "last_trip": trip,
    }
    assert parse_guard("") is None
    got = parse_guard(f"false 1005\n{json.dumps(state)}\n\n")
    assert got == {"running": False, "now": 1005.0, "state": state, "last_trip": None}


def test_the_memory_guard_probe_script_reads_the_guards_files(tmp_path: Path) -> None:
    """The real probe script over a guard directory: no guard there, then a stopped one's files."""
    import json
    import os
    import subprocess

    from sparkctl.top.nodes import GUARD_SH, parse_guard

    def probe() -> dict | None:
        env = {**os.environ, "HOME": str(tmp_path)}
        out = subprocess.run(
            ["sh", "-c", GUARD_SH, "sparkctl-guard", "c1"], capture_output=True, text=True, env=env
        )
        assert out.returncode == 0, out.stderr
        return parse_guard(out.stdout)

    assert probe() is None
    d = tmp_path / ".local" / "state" / "sparkctl" / "guard"
    d.mkdir(parents=True)
    (d / "c1.json").write_text(json.dumps({"at": 1.0}))
    (d / "c1.lock").write_text("{}")
    (d / "c1.trips.jsonl").write_text(
        json.dumps({"at": 0.5, "reason": "a"}) + "\n" + json.dumps({"at": 0.9, "reason": "b"}) + "\n"
    )
    got = probe()
    assert got is not None and got["running"] is False and got["now"] and got["now"] > 1e9
    assert got["state"] == {"at": 1.0} and got["last_trip"] == {"at": 0.9, "reason": "b"}
