"""GPU probe parsers on outputs captured from real machines (tests/fixtures/gpu/README.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkctl.facts import gpu as probe
from sparkctl.findings import Severity
from sparkctl.preflight.checks import gpus as drift

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "gpu"


def text(name: str) -> str:
    return (FIX / name).read_text()


def test_h200_query_header_and_meminfo() -> None:
    rep = probe.report_from_smi(
        text("h200/query-gpu.csv"), text("h200/nvidia-smi-q.txt"), text("h200/meminfo.txt")
    )
    assert [g.index for g in rep.gpus] == [0, 1]
    g0 = rep.gpus[0]
    assert g0.name == "NVIDIA H200"
    assert g0.compute_cap == "9.0"
    assert g0.memory_total_mib == 143771 and g0.memory_free_mib == 143156 and g0.memory_used_mib == 0
    assert g0.pci_bus_id == "00000000:00:06.0"
    assert g0.uuid == "GPU-60c00022-c9d5-6b6a-55f2-f2bd215fddd9"
    assert (rep.driver_version, rep.cuda_version) == ("580.159.04", "13.0")
    assert rep.unified_memory is False
    # Discrete GPU: the budget is the GPU's own free memory, not the host's.
    assert rep.usable_memory_mib == 143156
    assert rep.mem_available_mib == 257213


def test_h200_driver_comes_from_the_csv_when_no_header_was_read() -> None:
    rep = probe.report_from_smi(text("h200/query-gpu.csv"))
    assert rep.driver_version == "580.159.04" and rep.cuda_version is None


def test_h200_torch_fallback() -> None:
    rep = probe.report_from_torch(text("h200/torch-probe.json"), text("h200/meminfo.txt"))
    assert rep.source == "torch"
    assert [g.name for g in rep.gpus] == ["NVIDIA H200", "NVIDIA H200"]
    assert rep.gpus[0].compute_cap == "9.0"
    assert rep.torch_version == "2.11.0+cu130" and rep.nccl_version == "2.28.9" and rep.cuda_version == "13.0"
    assert rep.gpus[0].memory_total_mib == 143155  # CUDA's view: a little less than nvidia-smi's
    assert rep.unified_memory is False


def test_gb10_reports_no_memory_so_the_budget_is_memavailable() -> None:
    fields = ("index", "name", "memory.total", "memory.used", "memory.free")
    rep = probe.report_from_smi(
        text("gb10/query-gpu.csv"), text("gb10/nvidia-smi.txt"), text("gb10/meminfo.txt"), fields=fields
    )
    (gpu,) = rep.gpus
    assert gpu.name == "NVIDIA GB10"
    assert gpu.memory_total_mib is None and gpu.memory_free_mib is None
    assert rep.unified_memory is True
    assert rep.usable_memory_mib == 118566368 // 1024
    assert (rep.driver_version, rep.cuda_version) == ("580.126.09", "13.0")


def test_gb10_plain_table_says_not_supported() -> None:
    rep = probe.report_from_table(text("gb10/nvidia-smi.txt"), text("gb10/meminfo.txt"))
    (gpu,) = rep.gpus
    assert (gpu.name, gpu.pci_bus_id, gpu.memory_total_mib) == ("NVIDIA GB10", "0000000F:01:00.0", None)
    assert rep.unified_memory and rep.usable_memory_mib == 115787


def test_gb10_torch_fallback_does_not_trust_cuda_total() -> None:
    out = json.dumps(
        {
            "torch": "2.9.0",
            "cuda": "13.0",
            "gpus": [
                {
                    "index": 0,
                    "name": "NVIDIA GB10",
                    "capability": "12.1",
                    "total_memory": 128 << 30,
                    "free_memory": 100 << 30,
                }
            ],
        }
    )
    rep = probe.report_from_torch(out, text("gb10/meminfo.txt"))
    assert rep.unified_memory and rep.gpus[0].memory_total_mib is None and rep.usable_memory_mib == 115787


def test_rtx3090_table_with_driver_580_banner() -> None:
    rep = probe.report_from_table(text("rtx3090/nvidia-smi.txt"))
    (gpu,) = rep.gpus
    assert gpu.name == "NVIDIA GeForce RTX 3090"
    assert (gpu.memory_used_mib, gpu.memory_total_mib, gpu.memory_free_mib) == (15005, 24576, 9571)
    assert (rep.driver_version, rep.cuda_version) == ("580.142", "13.0")
    assert not rep.unified_memory


def test_rtx3090_pair_with_driver_610_kmd_umd_banner() -> None:
    rep = probe.report_from_table(text("rtx3090/nvidia-smi-2x-driver610.txt"))
    assert [(g.index, g.pci_bus_id) for g in rep.gpus] == [(0, "00000000:04:00.0"), (1, "00000000:09:00.0")]
    assert (rep.driver_version, rep.cuda_version) == ("610.43.03", "13.3")
    assert rep.usable_memory_mib == 24576 - 21865  # the fuller of the two GPUs bounds a TP=2 engine


def test_h200_table_matches_query() -> None:
    table = probe.parse_smi_table(text("h200/nvidia-smi.txt"))
    query = probe.parse_query_gpu(text("h200/query-gpu.csv"))
    assert [(g.index, g.name, g.pci_bus_id, g.memory_total_mib) for g in table] == [
        (g.index, g.name, g.pci_bus_id, g.memory_total_mib) for g in query
    ]


@pytest.mark.parametrize(
    "bad",
    [
        'Field "compute_cap" is not a valid field to query.\n',
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
    ],
)
def test_error_text_is_not_parsed_as_gpus(bad: str) -> None:
    with pytest.raises(probe.ProbeParseError):
        probe.report_from_smi(bad)


def test_empty_query_output_is_an_error() -> None:
    with pytest.raises(probe.ProbeParseError, match="no GPU"):
        probe.report_from_smi("\n")


def test_drift_between_nodes() -> None:
    h200 = probe.report_from_smi(text("h200/query-gpu.csv"), text("h200/nvidia-smi-q.txt"))
    gb10 = probe.report_from_smi(
        text("gb10/query-gpu.csv"),
        text("gb10/nvidia-smi.txt"),
        fields=("index", "name", "memory.total", "memory.used", "memory.free"),
    )
    assert drift.compare_nodes({"a": h200, "b": h200}) == []
    findings = {f.check: f for f in drift.compare_nodes({"a": h200, "b": gb10})}
    assert findings["DriverDrift"].severity is Severity.WARN
    assert (
        "a=580.159.04" in findings["DriverDrift"].message
        and "b=580.126.09" in findings["DriverDrift"].message
    )
    assert "GpuArchDrift" not in findings  # GB10's CSV had no compute_cap: unknown is not drift
    assert "CudaDrift" not in findings  # both 13.0
    gb10_torch = probe.report_from_torch(
        json.dumps(
            {
                "cuda": "13.0",
                "gpus": [
                    {
                        "index": 0,
                        "name": "NVIDIA GB10",
                        "capability": "12.1",
                        "total_memory": 1,
                        "free_memory": 1,
                    }
                ],
            }
        )
    )
    arch = drift.compare_nodes({"spark1": h200, "spark2": gb10_torch})
    assert [(f.check, f.severity) for f in arch] == [("GpuArchDrift", Severity.ERROR)]
    assert "spark1=9.0" in arch[0].message and "spark2=12.1" in arch[0].message


def test_meminfo() -> None:
    mem = probe.parse_meminfo(text("h200/meminfo.txt"))
    assert mem["MemAvailable"] // 1024 == 257213
    assert mem["MemTotal"] >= mem["MemAvailable"]


def test_preflight_gpu_probe_runs_query_and_header_in_one_exec(tmp_path, monkeypatch) -> None:
    """The real probe script, through a real shell, against an `nvidia-smi` that replays the H200
    captures: the CUDA version (only in `nvidia-smi -q`) must reach the report, or CudaDrift is blind."""
    import os
    import stat

    from sparkctl.connectors.local import LocalConnector
    from sparkctl.facts.gpu import gpus_probe

    fx = Path(__file__).resolve().parents[2] / "fixtures" / "gpu" / "h200"
    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        f'#!/bin/sh\nif [ "$1" = "-q" ]; then cat {fx}/nvidia-smi-q.txt; else cat {fx}/query-gpu.csv; fi\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    report = gpus_probe().run(LocalConnector("h200"))
    assert len(report.gpus) == 2 and report.gpus[0].compute_cap == "9.0"
    assert report.driver_version and report.cuda_version == "13.0"


def test_preflight_gpu_probe_without_nvidia_smi_is_none(tmp_path, monkeypatch) -> None:
    from sparkctl.connectors.local import LocalConnector
    from sparkctl.facts.gpu import gpus_probe

    monkeypatch.setenv("PATH", "/bin")  # sh and head, but no nvidia-smi on this machine
    assert not Path("/bin/nvidia-smi").exists()
    assert gpus_probe().run(LocalConnector("cpu")) is None
