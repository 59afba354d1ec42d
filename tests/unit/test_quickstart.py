"""Every `sparkctl ...` command in docs/quickstart.md parses against the real CLI.

Commands come from the bash blocks and from inline `code` spans. Each one goes through click's
own parser (the root options, the subcommand, nested groups, every option and argument) without
running: a renamed flag, a missing argument or an extra one fails here. The profile-only ones
also run for real against a shipped profile, as far as they go without a node.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from sparkctl.cli import app

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "quickstart.md"


def quickstart_commands() -> list[str]:
    text = DOC.read_text()
    found: list[str] = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        found += [
            ln.split("  #")[0].strip() for ln in block.splitlines() if ln.strip().startswith("sparkctl")
        ]
    found += [m for m in re.findall(r"`(sparkctl [^`\d][^`]*)`", text) if "MODE" not in m]
    return list(dict.fromkeys(found))


def _rest(ctx) -> list[str]:  # click Context (click's, or typer's vendored copy)
    protected = getattr(ctx, "protected_args", None) or getattr(ctx, "_protected_args", None) or []
    return [*protected, *ctx.args]


def parse(argv: list[str]) -> list[str]:
    """Parse like click does at run time, invoking nothing; returns the command path."""
    group = get_command(app)
    ctx = group.make_context("sparkctl", list(argv), resilient_parsing=False)
    path = []
    cmd, rest = group, _rest(ctx)
    while rest and hasattr(cmd, "resolve_command"):
        name, cmd, rest = cmd.resolve_command(ctx, rest)
        path.append(name)
        ctx = cmd.make_context(name, rest, parent=ctx)
        rest = _rest(ctx)
    assert not rest, f"left over: {rest}"
    return path


def test_the_quickstart_covers_the_main_job() -> None:
    paths = {" ".join(parse(shlex.split(c)[1:])) for c in quickstart_commands() if "--version" not in c}
    assert {"init", "image build", "ship", "preflight", "up", "verify", "status", "logs", "down"} <= paths


@pytest.mark.parametrize("command", quickstart_commands())
def test_quickstart_command_parses(command: str) -> None:
    argv = shlex.split(command)[1:]
    if argv == ["--version"]:
        res = CliRunner().invoke(app, argv)
        assert res.exit_code == 0 and res.output.startswith("sparkctl ")
        return
    assert parse(argv)


@pytest.mark.parametrize(
    "argv", [["-p", "PROFILE", "preflight", "tp2", "--help"], ["profile", "check", "-p", "PROFILE"]]
)
def test_profile_commands_run(argv: list[str]) -> None:
    prof = str(ROOT / "profiles" / "dual-spark.yaml")
    res = CliRunner().invoke(app, [prof if a == "PROFILE" else a for a in argv], env={"COLUMNS": "100"})
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize("doc", ["docs/quickstart.md", "README.md"])
def test_the_first_profiles_copied_as_printed_pass_profile_check(tmp_path: Path, doc: str) -> None:
    """The two annotated profiles that open the quickstart and the README, byte for byte."""
    blocks = re.findall(r"```yaml\n(.*?)```", (ROOT / doc).read_text(), re.S)[:2]
    assert len(blocks) == 2 and "address: local" in blocks[0] and "gpus: 2" in blocks[1], blocks
    for i, block in enumerate(blocks):
        path = tmp_path / f"p{i}.yaml"
        path.write_text(block)
        res = CliRunner().invoke(app, ["profile", "check", "-p", str(path)], env={"COLUMNS": "200"})
        assert res.exit_code == 0 and res.output.startswith("ok profile"), res.output
