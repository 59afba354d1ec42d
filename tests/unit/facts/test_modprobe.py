"""The modprobe.d listing: the probe's script in a real sh over a stand-in tree, and its parser."""

from __future__ import annotations

import subprocess
from pathlib import Path

from sparkctl.facts.modprobe import OVERRIDE, SCRIPT, modprobe_probe, parse_modprobe


def test_the_script_lists_nvidia_files_and_the_override_with_their_lines(tmp_path: Path) -> None:
    etc, lib = tmp_path / "etc", tmp_path / "lib"
    etc.mkdir()
    lib.mkdir()
    (etc / OVERRIDE).write_text("# set by a tuning script\noptions nvidia_drm modeset=0 fbdev=0\n")
    (etc / "nvidia-graphics-drivers.conf").write_text("blacklist nouveau\noptions nvidia NVreg_X=1\n")
    (lib / "other.conf").write_text("options snd_hda power_save=1\n")  # names no nvidia module
    res = subprocess.run(
        ["sh", "-c", SCRIPT, "x", str(etc), str(lib), str(tmp_path / "nowhere")],
        capture_output=True,
        text=True,
        check=True,
    )
    got = parse_modprobe(res.stdout)
    assert got == {
        str(etc / "nvidia-graphics-drivers.conf"): ["blacklist nouveau", "options nvidia NVreg_X=1"],
        str(etc / OVERRIDE): ["options nvidia_drm modeset=0 fbdev=0"],
    }


def test_the_probe_is_an_argv_with_the_dirs_as_parameters() -> None:
    probe = modprobe_probe()
    assert probe.argv[:3] == ("sh", "-c", SCRIPT) and "/etc/modprobe.d" in probe.argv
    assert parse_modprobe("#sparkctl-modprobe end\n") == {}
