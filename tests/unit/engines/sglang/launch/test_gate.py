"""SGLang's launch gate (engines/sglang/launch/gate.py): the releases that have it, and the flag
check's fix when an image's parser lacks the gate sparkctl rendered."""

from __future__ import annotations

import json

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
