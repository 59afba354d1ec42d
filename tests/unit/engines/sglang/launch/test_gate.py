"""SGLang's launch gate (engines/sglang/launch/gate.py): the releases that have it, and the flag
check's fix when an image's parser lacks the gate sparkctl rendered."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from sparkctl.engines.sglang.launch.flags import flag_findings, parse_check_output
from sparkctl.engines.sglang.launch.gate import GATE, launch_gate, missing_gate_fix


def test_the_gate_is_in_0523_and_later_only() -> None:
    assert launch_gate("0.5.23") is GATE and launch_gate("0.6.0") is GATE
    assert launch_gate("0.5.16") is None and launch_gate(None) is None and launch_gate("nightly") is None
    assert (GATE.flag, GATE.health_path, GATE.activate_path) == (
        "--gated-launch-port",
        "/health",
        "/gate/activate",
    )


def test_an_image_without_the_gate_names_the_setting_not_a_nearby_flag() -> None:
    out = {
        "sglang_version": "0.5.16",
        "errors": [{"kind": "unknown", "flag": "--gated-launch-port"}],
        "valid_flags": ["--gc-threshold", "--port", "--host"],
        "choices": {},
    }
    check = parse_check_output("image", 0, json.dumps(out), "")
    [f] = [f for f in flag_findings(check, "spark1") if f.severity.value == "error"]
    assert "has no flag --gated-launch-port" in f.message
    assert f.fix == missing_gate_fix("--gated-launch-port")
    assert "memory.gated_start: false" in f.fix and "engine.sglang_version" in f.fix
    assert missing_gate_fix("--gc-threshold") is None


def _installed_source(*parts: str) -> str | None:
    """A file of the installed SGLang, read as text (nothing of it is imported); None: not here."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(spec.submodule_search_locations[0], *parts)
    return path.read_text() if path.is_file() else None


def test_the_gate_is_the_installed_sglangs_own() -> None:
    """GATE's paths and log markers against the installed SGLang (0.5.23 here): the stand-in and
    lifecycle/gated.py speak this protocol, so a release that renames one must fail here."""
    gate = _installed_source("srt", "distributed", "gated_launch.py")
    boot = _installed_source("srt", "distributed", "bootstrap.py")
    if gate is None or boot is None:
        pytest.skip("SGLang with a launch gate is not installed here")
    assert f'@app.get("{GATE.health_path}")' in gate and f'@app.post("{GATE.activate_path}")' in gate
    assert GATE.waiting_marker in gate and GATE.activated_marker in gate
    assert "world_group.rank_in_group == 0" in gate  # the first rank alone serves it
    # it binds rank 0's --host (planning/launch_gate.py asks it there) on the flag's port
    assert "host=get_serving().host, port=get_parallel().gated_launch_port" in " ".join(boot.split())
    fields = _installed_source("srt", "arg_groups", "fields", "parallel.py") or ""
    assert GATE.flag.removeprefix("--").replace("-", "_") in fields
