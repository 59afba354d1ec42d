"""The launch-line readers' shared pieces (engines/command_words.py)."""

from __future__ import annotations

from sparkctl.engines.command_words import CHECK, arg_value, finding


def test_words_become_the_value_that_reads_back_as_written() -> None:
    assert arg_value([]) is True
    assert arg_value(["8"]) == 8 and arg_value(["0.5"]) == 0.5
    assert arg_value(["0.90"]) == "0.90" and arg_value(["1e3"]) == "1e3"  # kept as the text written
    assert arg_value(["a", "2"]) == ["a", 2]


def test_a_finding_is_an_error_unless_a_warning() -> None:
    err, warn = finding("m", "f"), finding("m", None, warn=True)
    assert (err.check, err.severity.name, err.fix) == (CHECK, "ERROR", "f")
    assert warn.severity.name == "WARN" and warn.fix is None
