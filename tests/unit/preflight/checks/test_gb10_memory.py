"""Gb10VisibleMemory: the drm override file is found on a GB10 and named with its fix."""

from __future__ import annotations

from sparkctl.facts.modprobe import OVERRIDE
from sparkctl.findings import Severity
from sparkctl.preflight.checks.gb10_memory import Gb10VisibleMemory, check_modprobe


def test_the_drm_override_is_an_error_naming_the_file_its_lines_and_the_fix() -> None:
    path = f"/etc/modprobe.d/{OVERRIDE}"
    (f,) = check_modprobe(
        "spark1", {path: ["options nvidia_drm modeset=0"], "/etc/modprobe.d/nvidia.conf": ["x"]}
    )
    assert f.severity is Severity.ERROR and f.node == "spark1"
    assert path in f.message and "modeset=0" in f.message and "62 GB" in f.message
    assert f"sudo rm {path}" in f.fix and "update-initramfs" in f.fix


def test_without_the_override_it_is_ok() -> None:
    (f,) = check_modprobe("spark1", {"/etc/modprobe.d/nvidia.conf": ["options nvidia NVreg_X=1"]})
    assert f.severity is Severity.OK


def test_it_is_a_registered_check_reading_the_modprobe_probe() -> None:
    from sparkctl.preflight.registry import REGISTRY

    assert isinstance(REGISTRY["Gb10VisibleMemory"], Gb10VisibleMemory)
    assert "modprobe" in Gb10VisibleMemory().probes(None, "spark1")  # type: ignore[arg-type]
