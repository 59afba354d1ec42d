"""Every example `--help` prints is a command a user can copy: it parses against the real CLI.

Issue 42 found two that did not: `upgrade --dry-run` (no such option) and `export k8s tp2 > file`
(only the summary reaches the file). Each example of commands/help_text.py goes through click's own
parser (tests/unit/test_quickstart.py's `parse`), invoking nothing: a renamed or missing option, an
extra argument or a redirect fails here.
"""

from __future__ import annotations

import shlex

import pytest

from sparkctl.commands.help_text import HELP
from tests.unit.test_quickstart import parse

EXAMPLES = sorted({example for _, example in HELP.values()})


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_help_example_parses(example: str) -> None:
    argv = shlex.split(example)
    assert argv[0] == "sparkctl" and not {">", "|", ">>"} & set(argv), example
    assert parse(argv[1:]), example


def test_a_wrong_example_fails_here() -> None:
    with pytest.raises(Exception, match="dry-run"):
        parse(["upgrade", "--dry-run"])
