"""`sparkctl profile check`: ok with every mode's shape, and what `plan` would warn about."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from sparkctl.cli import app

ROOT = Path(__file__).resolve().parents[3]
ENV = {"COLUMNS": "400", "SPARKCTL_PROFILE": ""}


def test_a_spark_without_gpu_is_warned_about_by_profile_check(tmp_path: Path) -> None:
    """It said `ok profile` and nothing else: no memory cap, admission, settle or guard, silently."""
    text = re.sub(
        r"\n    gpu: \{name: NVIDIA GB10[^\n]*", "", (ROOT / "profiles" / "dual-spark.yaml").read_text()
    )
    path = tmp_path / "p.yaml"
    path.write_text(text)
    res = CliRunner().invoke(app, ["profile", "check", "-p", str(path)], env=ENV)
    assert res.exit_code == 0 and res.output.startswith("ok profile"), res.output
    said = [ln for ln in res.output.splitlines() if "looks like a DGX Spark but has no gpu: section" in ln]
    assert [ln.split()[:2] for ln in said] == [["warning:", "nodes.spark1"], ["warning:", "nodes.spark2"]]
    data = json.loads(
        CliRunner().invoke(app, ["profile", "check", "-p", str(path), "--json"], env=ENV).stdout
    )
    assert sum("has no gpu: section" in w for w in data["warnings"]) == 2, data["warnings"]


def test_a_warning_shared_by_every_mode_is_said_once() -> None:
    path = ROOT / "profiles" / "dual-spark.yaml"
    res = CliRunner().invoke(app, ["profile", "check", "-p", str(path)], env=ENV)
    assert res.exit_code == 0, res.output
    assert res.output.count("warning: model.target.revision is main") == 1, res.output
