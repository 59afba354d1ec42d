"""`sparkctl persist`: the command against nodes it cannot reach (the flow's own tests are
tests/unit/lifecycle/persist/)."""

from __future__ import annotations

from pathlib import Path

from sparkctl.errors import ExitCode
from tests.unit.commands._unreachable import sparkctl, unreachable_copy


def test_install_dry_run_names_each_unreachable_node_with_its_fix_and_writes_nothing(tmp_path: Path) -> None:
    prof = unreachable_copy(tmp_path)
    res = sparkctl(
        tmp_path,
        "persist",
        "install",
        "tp2",
        "--dry-run",
        "--unit-dir",
        str(tmp_path / "units"),
        "-p",
        str(prof),
    )
    assert res.returncode == ExitCode.CONNECT, (res.stdout, res.stderr)
    errors = [ln for ln in (res.stdout + res.stderr).splitlines() if ln.startswith("error")]
    assert {n for n in ("spark1", "spark2") if any(n in ln for ln in errors)} == {"spark1", "spark2"}, errors
    assert "fix:" in res.stdout + res.stderr
    assert not (tmp_path / "units").exists()


def test_persist_lists_its_three_verbs(tmp_path: Path) -> None:
    res = sparkctl(tmp_path, "persist", "--help")
    assert res.returncode == 0
    for verb in ("install", "status", "remove"):
        assert verb in res.stdout
