"""yaml_compose.py: the composed document checked before it is constructed (numbers, aliases,
duplicate keys) and the line of a key path a message names."""

from __future__ import annotations

import pytest

from sparkctl.yaml_compose import Refused, key_line, line_index

TEXT = "engine:\n  port: 1\n  args:\n    mem-fraction-static: 0.8\nnodes:\n  - name: a\n  - name: b\n"


@pytest.mark.parametrize(
    ("message", "line"),
    [
        ("engine.port: taken", 2),
        ("engine.args.mem-fraction-static: too big", 4),
        ("nodes[1].name: twice", 7),
        ("nodes[1]: no", 7),
        ("engine.nope: no such key", None),
        ("unknown mode 'x'", None),
        ("rank 0: engine.port: not a key path first", None),
    ],
)
def test_key_line_finds_the_key_a_message_starts_with(message: str, line: int | None) -> None:
    assert key_line(TEXT, message) == line


def test_key_line_of_text_that_does_not_compose_is_none() -> None:
    assert key_line("a: [\n", "a: x") is None


def _index(text: str) -> dict:
    import yaml

    return line_index(yaml.compose(text, Loader=yaml.SafeLoader))


@pytest.mark.parametrize(
    "text", ["a: " + "9" * 20 + "\n", "a: -" + "1" * 25 + "\n", "a: .nan\n", "a: -.inf\n", "a: 1.0e+400\n"]
)
def test_numbers_no_key_can_hold_are_refused(text: str) -> None:
    with pytest.raises(Refused) as bad:
        _index(text)
    assert bad.value.line == 1 and bad.value.fix


@pytest.mark.parametrize("text", ["a: 9223372036854775807\n", "a: '1e999'\n", "a: 1:30.5\n", "a: 0.9\n"])
def test_numbers_that_fit_and_quoted_names_pass(text: str) -> None:
    assert _index(text)[("a",)] == 1
