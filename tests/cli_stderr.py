"""Every sparkctl run in the test suite: no Python traceback on stderr unless SPARKCTL_DEBUG=1.

An autouse fixture (tests/conftest.py) wraps `subprocess.run` and typer's `CliRunner.invoke`
for the whole suite: each sparkctl run is checked after the test that made it, so any error path
a test drives (unit, testbed, server) proves it prints one line + fix instead of a traceback.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest

MARK = "Traceback (most recent call last)"


def _is_sparkctl(argv: Any) -> bool:
    if isinstance(argv, str):
        return "sparkctl" in argv.split()[:4]
    if not isinstance(argv, Sequence):
        return False
    head = [str(a) for a in list(argv)[:3]]
    return any(os.path.basename(a) == "sparkctl" or "sparkctl.cli" in a for a in head)


def _debug(env: Mapping[str, str] | None) -> bool:
    return bool((env if env is not None else os.environ).get("SPARKCTL_DEBUG"))


def _text(data: bytes | str | None) -> str:
    if isinstance(data, bytes):
        return data.decode(errors="replace")
    return data or ""


@pytest.fixture(autouse=True)
def no_cli_tracebacks(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Yields the list of offending runs (tests that expect a traceback may clear it)."""
    from typer.testing import CliRunner

    found: list[str] = []
    real_run, real_invoke = subprocess.run, CliRunner.invoke

    def run(*args: Any, **kwargs: Any) -> subprocess.CompletedProcess:
        res = real_run(*args, **kwargs)
        argv = args[0] if args else kwargs.get("args")
        if _is_sparkctl(argv) and not _debug(kwargs.get("env")) and MARK in _text(res.stderr):
            found.append(f"{argv}: {_text(res.stderr)[-2000:]}")
        return res

    def invoke(self: CliRunner, cli: Any, args: Any = None, *a: Any, **kwargs: Any) -> Any:
        res = real_invoke(self, cli, args, *a, **kwargs)
        if _debug(kwargs.get("env")):
            return res
        exc = res.exception
        if exc is not None and not isinstance(exc, SystemExit):
            found.append(f"sparkctl {args}: uncaught {type(exc).__name__}: {exc}")
        elif MARK in _text(getattr(res, "stderr", None) if _has_stderr(res) else res.output):
            found.append(f"sparkctl {args}: {res.output[-2000:]}")
        return res

    monkeypatch.setattr(subprocess, "run", run)
    monkeypatch.setattr(CliRunner, "invoke", invoke)
    yield found
    if found:
        pytest.fail(
            "sparkctl printed a traceback outside SPARKCTL_DEBUG=1:\n" + "\n".join(found), pytrace=False
        )


def _has_stderr(res: Any) -> bool:
    try:
        return res.stderr is not None
    except ValueError:  # older click: stderr not captured separately
        return False
