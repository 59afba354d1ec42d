"""`--help` at 80 columns: whole summaries, an example per command, one meaning per short option,
MODE placeholders, `-p` at every level."""

from __future__ import annotations

import re
from pathlib import Path

import typer.main
from typer.testing import CliRunner

from sparkctl.cli import app

ROOT = Path(__file__).resolve().parents[3]
ENV = {"COLUMNS": "80"}


def _commands() -> dict:
    root = typer.main.get_command(app)  # typer's own click (vendored in recent typer)
    out = {}
    for name, cmd in root.commands.items():
        if hasattr(cmd, "commands"):
            out.update({f"{name} {sub}": c for sub, c in cmd.commands.items()})
        else:
            out[name] = cmd
    return out


def test_the_command_list_shows_every_summary_whole_at_80_columns() -> None:
    res = CliRunner().invoke(app, ["--help"], env=ENV)
    assert res.exit_code == 0
    listing = res.output.split("Commands:", 1)[1]
    lines = [ln for ln in listing.splitlines() if ln.strip()]
    assert len(lines) >= 18 and all(len(ln) <= 80 for ln in lines), lines
    assert not [ln for ln in lines if ln.rstrip().endswith("...")], lines


def test_every_command_has_an_example_and_mode_in_words() -> None:
    for name in _commands():
        res = CliRunner().invoke(app, [*name.split(), "--help"], env=ENV)
        assert res.exit_code == 0, (name, res.output)
        assert "Example:" in res.output and "  sparkctl " in res.output.split("Example:")[1], name
        usage = res.output.splitlines()[0]
        assert "[mode]" not in usage and "{mode}" not in usage, usage
        assert "<list[str]>" not in res.output, (name, res.output)


def test_a_short_option_means_one_thing_everywhere() -> None:
    meaning: dict[str, set[str]] = {}
    for cmd in _commands().values():
        for p in cmd.params:
            for short in (o for o in getattr(p, "opts", []) if re.fullmatch(r"-[a-zA-Z]", o)):
                meaning.setdefault(short, set()).add(p.name or "")
    assert {s: m for s, m in meaning.items() if len(m) > 1} == {}


def test_profile_option_at_the_group_level(tmp_path: Path) -> None:
    prof = str(ROOT / "profiles" / "solo-spark.yaml")
    env = {**ENV, "SPARKCTL_PROFILE": str(tmp_path / "missing.yaml")}
    res = CliRunner().invoke(app, ["profile", "-p", prof, "check"], env=env)
    assert res.exit_code == 0 and "ok profile for cluster spark" in res.output, res.output
