"""Pure parts of `verify` and its CLI argument handling (no server needed)."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from sparkctl.errors import ConnectError, UsageError
from sparkctl.verify.checks import CHECKS, EFFORTS, CheckFailed, _judge_cache, _validate_schema, select
from sparkctl.verify.client import api_base
from sparkctl.verify.runner import verify


def test_check_names_are_unique_and_documented() -> None:
    names = [c.name for c in CHECKS]
    assert len(names) == len(set(names))
    assert [n for n in names if n.startswith("ResponsesEffort")] == [f"ResponsesEffort[{e}]" for e in EFFORTS]
    assert all(c.proves and c.usual_cause for c in CHECKS)
    from pathlib import Path

    doc = (Path(__file__).parents[2] / "docs" / "verify-bench.md").read_text()
    for name in names:
        assert name.split("[")[0] in doc, name


def test_select_by_prefix() -> None:
    assert [c.name for c in select(["prefixcache"])] == ["PrefixCacheResponses", "PrefixCacheChat"]
    assert len(select(None)) == len(CHECKS)
    assert select(["nothing"]) == []


def test_schema_validation() -> None:
    ok = '{"city": "Paris", "temperature_c": 18, "conditions": "sunny"}'
    assert _validate_schema(ok)["city"] == "Paris"
    with pytest.raises(CheckFailed, match="at temperature_c"):
        _validate_schema('{"city": "Paris", "temperature_c": "warm", "conditions": "sunny"}')
    with pytest.raises(CheckFailed, match="at conditions"):
        _validate_schema('{"city": "Paris", "temperature_c": 1, "conditions": "snow"}')
    with pytest.raises(CheckFailed, match="Invalid JSON"):
        _validate_schema("It is sunny.")


def test_cache_judgement() -> None:
    assert "64 cached" in _judge_cache([(2000, 0), (2000, 64)], "f").summary
    with pytest.raises(CheckFailed, match="f = 0 on the repeated 2000-token prompt"):
        _judge_cache([(2000, 0), (2000, 0)], "f")
    with pytest.raises(CheckFailed, match="f is missing"):
        _judge_cache([(2000, None), (2000, None)], "f")


def test_api_base() -> None:
    assert api_base("http://10.0.0.1:8888") == "http://10.0.0.1:8888/v1"
    assert api_base("http://h:1/v1/") == "http://h:1/v1"
    with pytest.raises(UsageError):
        api_base("10.0.0.1:8888")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # released on close: nothing listens there


def test_unreachable_endpoint_is_one_connect_error() -> None:
    pytest.importorskip("openai")
    with pytest.raises(ConnectError, match="no OpenAI-compatible server answers"):
        verify(f"http://127.0.0.1:{_closed_port()}", "m", timeout_s=5)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sparkctl", *args], capture_output=True, text=True, timeout=120
    )


def test_cli_errors_are_one_line_with_distinct_codes() -> None:
    pytest.importorskip("openai")
    down = _cli("verify", "--url", f"http://127.0.0.1:{_closed_port()}", "--model", "m")
    assert down.returncode == 5 and "no OpenAI-compatible server answers" in down.stderr
    assert "Traceback" not in down.stderr
    half = _cli("verify", "--url", "http://127.0.0.1:1")
    assert half.returncode == 2 and "--url and --model go together" in half.stderr
    cmp = _cli("bench", "--url", "http://127.0.0.1:1", "--model", "m", "--compare", "solo", "tp2")
    assert cmp.returncode == 2 and "--compare switches modes of a profile" in cmp.stderr
