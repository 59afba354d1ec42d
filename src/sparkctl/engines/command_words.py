"""What every engine's launch-line reader (engines/<kind>/from_command.py) shares: a flag's words
as a profile value, and the finding it reports."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkctl.findings import Finding, Severity

if TYPE_CHECKING:
    from sparkctl.profile.schema import ArgValue

CHECK = "FromCommand"


def arg_value(values: list[str]) -> ArgValue:
    """The words after a flag as a profile value: none = a bare flag, one = a number where it
    reads back as the same text, several = a list."""

    def one(text: str) -> str | int | float:
        for kind in (int, float):
            try:
                number = kind(text)
            except ValueError:
                continue
            if str(number) == text:
                return number
        return text

    if not values:
        return True
    return one(values[0]) if len(values) == 1 else [one(v) for v in values]


def finding(message: str, fix: str | None, *, warn: bool = False) -> Finding:
    return Finding(CHECK, Severity.WARN if warn else Severity.ERROR, message, fix=fix)
