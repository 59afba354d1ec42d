"""PortFree's planned ports (preflight/checks/ports.py): a gated start's launch gate is checked on
the group head like its other ports (the rest of PortFree: tests/unit/preflight/test_pairs.py)."""

from __future__ import annotations

from pathlib import Path

import yaml

from sparkctl.planning.build import build_plan
from sparkctl.preflight.checks.ports import planned_ports
from sparkctl.profile import load_profile_text

ROOT = Path(__file__).resolve().parents[4]


def dual(**memory):
    doc = yaml.safe_load((ROOT / "profiles" / "dual-spark.yaml").read_text())
    doc.setdefault("memory", {}).update(memory)
    return load_profile_text(yaml.safe_dump(doc), "p.yaml")


def test_a_gated_groups_launch_gate_is_a_planned_port_of_its_head() -> None:
    gated = planned_ports(build_plan(dual(gated_start=True), "tp2"))
    assert gated["spark1"][50058] == "launch gate" and "spark2" not in gated
    assert 50058 not in planned_ports(build_plan(dual(), "tp2"))["spark1"]
