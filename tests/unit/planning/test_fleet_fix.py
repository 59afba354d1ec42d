"""planning/fleet_fix.py: a fleet over a node's memory is refused with the per-node sums and a
fix that, applied to the profile, `plan` accepts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from sparkctl.errors import ProfileError
from sparkctl.planning.fleet import build_fleet, plan_fleet
from sparkctl.planning.fleet_fix import propose, refusal
from sparkctl.profile import load_profile_text

ROOT = Path(__file__).resolve().parents[3]
SPARKS = (ROOT / "profiles" / "fleet-two-sparks.yaml").read_text()
OVER = SPARKS.replace("gpu-memory-utilization: 0.25", "gpu-memory-utilization: 0.5")


def apply(text: str, fix: str) -> str:
    """The fix's `models.<svc>....<flag>: value` edits written into the profile's YAML."""
    data = yaml.safe_load(text)
    for path, value in re.findall(r"(models\.[\w.-]+): ([\d.]+)", fix):
        *keys, last = path.split(".")
        at = data
        for key in keys:
            at = at.setdefault(key, {})
        at[last] = float(value)
    return yaml.safe_dump(data, sort_keys=False)


def test_a_fleet_over_a_node_is_refused_with_the_sums_and_a_fix_that_fits() -> None:
    with pytest.raises(ProfileError) as err:
        plan_fleet(load_profile_text(OVER))
    exc = err.value
    assert exc.node == "spark2" and not exc.also  # spark1 (80.8 GiB) fits
    assert "chat 80.8 + coder 68.0 = 148.8 of 124.0 GiB" in exc.message
    assert "memory_gib 128 - memory.reserve_gib 4" in exc.message
    fix = exc.fix or ""
    assert "models.coder.engine.args.gpu-memory-utilization" in fix and "re-checked" in fix
    fixed = plan_fleet(load_profile_text(apply(OVER, fix)))  # what `plan --check` then accepts
    assert all(n.fits for n in fixed.nodes)


def test_a_flag_set_in_the_mode_is_fixed_in_the_mode() -> None:
    text = OVER.replace(
        "      solo:\n        nodes: [spark2]\n",
        "      solo:\n        nodes: [spark2]\n        args: {gpu-memory-utilization: 0.5}\n",
    )
    fleet = build_fleet(load_profile_text(text))
    words, fixed = propose(load_profile_text(text), fleet) or ([], None)
    assert any("models.coder.modes.solo.args.gpu-memory-utilization" in w for w in words), words
    assert fixed is not None and not fixed.over


def test_no_budget_fix_when_the_services_cannot_shrink_enough() -> None:
    # a node's reserve larger than its memory: no fraction leaves anything
    text = OVER.replace("fabric:\n", "memory: {reserve_gib: 127}\nfabric:\n", 1)
    prof = load_profile_text(text)
    errors = refusal(prof, build_fleet(prof))
    assert errors and all("run fewer services there" in (e.fix or "") for e in errors)
    assert {e.node for e in errors} == {"spark1", "spark2"}


def test_a_fleet_that_fits_has_no_refusal() -> None:
    prof = load_profile_text(SPARKS)
    assert refusal(prof, build_fleet(prof)) == []
