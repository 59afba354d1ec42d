"""The outputs docs/quickstart.md shows are what the code prints.

`up`'s closing lines are rendered by the very function the command calls (`print_up`) from the
plan of the shipped dual-spark profile's tp2 (what the quickstart's `init` writes for two
Sparks), and compared line by line with the block in the doc; the `verify` summary names the real
number of checks in the real format. A change to either output, or to the doc, fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sparkctl.commands.up_output import print_up
from sparkctl.lifecycle.steps import UpResult
from sparkctl.planning.build import build_plan
from sparkctl.profile import load_profile_file
from sparkctl.runtime.readiness import EndpointHealth

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "quickstart.md").read_text()


def _block_after(heading: str) -> list[str]:
    """The first output block (a fence with no language) after the heading."""
    blocks, current, lang = [], None, None
    for line in DOC.split(heading, 1)[1].splitlines():
        if line.startswith("```"):
            if current is None:
                current, lang = [], line[3:].strip()
            else:
                blocks.append((lang, current))
                current = None
        elif current is not None:
            current.append(line)
    return next(body for lang, body in blocks if not lang)


def test_the_up_output_in_the_quickstart_is_what_up_prints(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # the doc shows the lines unwrapped
    shown = _block_after("## 8. Start serving")
    ready = next(i for i, ln in enumerate(shown) if ln.startswith("ready in "))
    elapsed = float(re.match(r"ready in ([\d.]+)s", shown[ready]).group(1))
    plan = build_plan(load_profile_file(ROOT / "profiles" / "dual-spark.yaml"), "tp2")
    print_up(UpResult(plan, "started", EndpointHealth(True, [], True, "ready")), elapsed, None)
    printed = [ln.rstrip() for ln in capsys.readouterr().out.splitlines()]
    assert shown[ready:] == printed
    timeline = shown[:ready]  # the live timeline: each line "<seconds>s <phase>"
    assert timeline and all(re.fullmatch(r" *\d+\.\ds \S.*", ln) for ln in timeline), timeline


def test_the_verify_summary_in_the_quickstart_counts_the_real_checks() -> None:
    from sparkctl.verify.checks import select

    n = len(select(None))
    assert f"`{n} passed, 0 warnings, 0 failed`" in DOC
    assert not re.search(r"\d+/\d+ checks passed", DOC)
