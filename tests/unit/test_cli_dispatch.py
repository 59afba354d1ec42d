"""`sparkctl [-p X] COMMAND`: parsed by an app that holds COMMAND alone (typer builds a click
command for every command it holds on each run), with the same help and errors as the whole app."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from sparkctl import cli


def names(app) -> list[str]:  # typer.Typer
    return [c.name for c in app.registered_commands] + [g.name for g in app.registered_groups]


@pytest.mark.parametrize(
    ("argv", "held"),
    [
        (["ship", "--json"], ["ship"]),
        (["-p", "x.yaml", "ship", "tp2"], ["ship"]),
        (["--profile", "x.yaml", "-px.yaml", "--profile=x.yaml", "up"], ["up"]),
        (["image", "build", "r"], ["image"]),
        (["fabric-test"], ["fabric-test"]),
    ],
)
def test_a_known_command_gets_an_app_of_its_own(argv: list[str], held: list[str]) -> None:
    one = cli.parser_for(argv)
    assert one is not cli.app and names(one) == held
    assert one.registered_callback.callback is cli.app.registered_callback.callback  # -p, --version


def test_every_command_of_the_whole_app_is_found_in_its_module() -> None:
    """MODULE_OF_COMMAND is complete: each name the whole app holds gets an app of its own."""
    every = names(cli.app)
    assert len(every) > 20
    for name in every:
        one = cli.parser_for([name, "--help"])
        assert one is not cli.app and name in names(one), name


def test_the_whole_app_is_built_once() -> None:
    assert cli.whole_app() is cli.whole_app() is cli.app
    assert cli.parser_for(["--help"]) is cli.app


@pytest.mark.parametrize(
    "argv", [[], ["--help"], ["--version"], ["shp"], ["-p"], ["-p", "ship"], ["--help", "ship"]]
)
def test_anything_else_is_parsed_by_the_whole_app(argv: list[str]) -> None:
    assert cli.parser_for(argv) is cli.app


def test_shell_completion_gets_the_whole_app(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("_SPARKCTL_COMPLETE", "bash_complete")
    assert cli.parser_for(["ship"]) is cli.app


@pytest.mark.parametrize(
    "argv",
    [
        ["ship", "--help"],
        ["ship", "--no-such-flag"],
        ["ship", "--streams", "0"],
        ["image", "--help"],
        ["persist", "install", "--help"],
        ["-p", "missing.yaml", "ship", "--dry-run", "--json"],
    ],
)
def test_its_help_errors_and_exit_codes_are_the_whole_apps(argv: list[str]) -> None:
    runner = CliRunner()
    whole = runner.invoke(cli.app, argv, prog_name="sparkctl", env={"COLUMNS": "80"})
    one = runner.invoke(cli.parser_for(argv), argv, prog_name="sparkctl", env={"COLUMNS": "80"})
    assert (one.exit_code, one.output) == (whole.exit_code, whole.output)
    assert one.output.strip()
