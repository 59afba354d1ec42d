"""Pure parts of `verify`, the API key rule, and every bad-endpoint case against real sockets on
127.0.0.1: one line with cause and fix, the documented exit code, within --deadline + 2 s."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparkctl.clients.api import api_base, resolve_api_key
from sparkctl.errors import UsageError
from sparkctl.verify.base import CheckFailed, validate
from sparkctl.verify.chat_checks import SCHEMA, judge_cache
from sparkctl.verify.checks import CHECKS, select
from tests.server import badendpoints as bad

DOC = Path(__file__).parents[3] / "docs" / "verify-bench.md"


def test_check_names_unique_levelled_and_documented() -> None:
    names = [c.name for c in CHECKS]
    assert len(names) == len(set(names))
    assert all(c.proves and c.usual_cause and c.level in ("contract", "optional") for c in CHECKS)
    # vendor extensions and optional features warn; the OpenAI API contract fails
    optional = {"ThinkingSwitch", "PrefixCacheResponses", "PrefixCacheChat", "StreamTokenIds"}
    assert {c.name for c in CHECKS if c.level == "optional"} == optional
    doc = DOC.read_text()
    for name in names:
        assert f"| {name} |" in doc, name


def test_select_by_prefix() -> None:
    assert [c.name for c in select(["prefixcache"])] == ["PrefixCacheResponses", "PrefixCacheChat"]
    assert [c.name for c in select(["toolchoicen"])] == ["ToolChoiceNone", "ToolChoiceNamed"]
    assert len(select(None)) == len(CHECKS)
    assert select(["nothing"]) == []


def test_schema_validation_is_a_real_validator() -> None:
    validate({"city": "Paris", "temperature_c": 18, "conditions": "sunny"}, SCHEMA, "x")
    with pytest.raises(CheckFailed, match="at temperature_c: 'warm' is not of type 'integer'"):
        validate({"city": "Paris", "temperature_c": "warm", "conditions": "sunny"}, SCHEMA, "x")
    with pytest.raises(CheckFailed, match="'conditions' is a required property"):
        validate({"city": "Paris", "temperature_c": 1}, SCHEMA, "x")
    with pytest.raises(CheckFailed, match="Additional properties"):
        validate({"city": "P", "temperature_c": 1, "conditions": "rain", "x": 1}, SCHEMA, "x")


def test_cache_judgement() -> None:
    assert "64 cached" in judge_cache([(2000, 0), (2000, 64)], "f").summary
    with pytest.raises(CheckFailed, match="f = 0 on the repeated 2000-token prompt"):
        judge_cache([(2000, 0), (2000, 0)], "f")
    with pytest.raises(CheckFailed, match="f is missing"):
        judge_cache([(2000, None), (2000, None)], "f")
    with pytest.raises(CheckFailed, match="f = 2001"):  # more cached than prompt: not a real count
        judge_cache([(2000, 0), (2000, 2001)], "f")


def test_api_base() -> None:
    assert api_base("http://10.0.0.1:8888") == "http://10.0.0.1:8888/v1"
    assert api_base("http://h:1/v1/") == "http://h:1/v1"
    with pytest.raises(UsageError):
        api_base("10.0.0.1:8888")


def test_api_key_only_when_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-ambient")
    assert resolve_api_key(None, None, None) is None  # never the ambient OPENAI_API_KEY
    assert resolve_api_key("k1", None, "prof") == "k1"
    monkeypatch.setenv("MY_KEY", "k2")
    assert resolve_api_key(None, "MY_KEY", "prof") == "k2"
    assert resolve_api_key(None, None, "prof") == "prof"
    with pytest.raises(UsageError, match="NOPE_UNSET: that variable is not set"):
        resolve_api_key(None, "NOPE_UNSET", None)


def _cli(*args: str, env: dict | None = None) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    env = {**os.environ, "COLUMNS": "300", **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-m", "sparkctl", *args], capture_output=True, text=True, timeout=120, env=env
    )
    return proc, time.monotonic() - t0


def _one_line(proc: subprocess.CompletedProcess, code: int, *needles: str) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 2 and lines[0].startswith("error ") and lines[1].strip().startswith("fix:"), lines
    for needle in needles:
        assert needle in proc.stderr, (needle, proc.stderr)


DEADLINE = 10.0  # roomy: each case ends by its own limit (2-3 s), the deadline only guards
CASES = [
    # (endpoint, model, exit code, what the line says)
    ("closed", bad.MODEL, 5, ["cannot connect", "Connection refused"]),
    ("silent", bad.MODEL, 5, ["no reply", "check what listens there"]),
    ("500", bad.MODEL, 5, ["HTTP 500", "boom", "read its log"]),
    ("404", bad.MODEL, 5, ["HTTP 404", "not an OpenAI-compatible endpoint"]),
    ("html", bad.MODEL, 5, ["HTTP 200 but not an OpenAI model list", "text/html"]),
    (
        "ok",
        "wrong/name",
        2,
        ["model 'wrong/name' is not served", f"it serves: {bad.MODEL}", f"--model {bad.MODEL}"],
    ),
    ("stall", bad.MODEL, 3, ["no first token within --first-token-timeout 3s"]),
    ("stall-stream", bad.MODEL, 3, ["the stream stalled: no event for --stall-timeout 3s"]),
]


@pytest.mark.parametrize("command", ["verify", "bench"])
@pytest.mark.parametrize(("kind", "model", "code", "needles"), CASES, ids=[c[0] for c in CASES])
def test_bad_endpoint_is_one_line_within_the_deadline(command, kind, model, code, needles) -> None:
    pytest.importorskip("openai")
    extra = (
        ["--only", "ChatStream"]
        if command == "verify"
        else ["-w", "code", "--reps", "1", "--max-tokens", "4"]
    )
    # a stall is caught by its own limit well inside a --deadline roomy enough for a loaded machine
    deadline = DEADLINE * 3 if kind.startswith("stall") else DEADLINE
    limit = "3" if kind.startswith("stall") else "2"
    flags = ["--first-token-timeout", limit, "--stall-timeout", limit, "--deadline", str(deadline)]
    if kind == "closed":
        proc, _took = _cli(command, "--url", bad.closed_port(), "--model", model, *flags, *extra)
    elif kind == "silent":
        with bad.silent() as url:
            proc, _took = _cli(command, "--url", url, "--model", model, *flags, *extra)
    else:
        with bad.serving(kind) as (url, _):
            proc, _took = _cli(command, "--url", url, "--model", model, *flags, *extra)
    _one_line(proc, code, *needles)  # its own error, not "--deadline reached": the limit ended it


def test_deadline_shorter_than_timeout_wins() -> None:
    pytest.importorskip("openai")
    with bad.serving("stall") as (url, _):
        proc, _took = _cli(
            "verify", "--url", url, "--model", bad.MODEL, "--first-token-timeout", "60", "--deadline", "2"
        )
    _one_line(proc, 3, "--deadline reached during check Chat")


def test_json_holds_the_finished_checks_when_the_deadline_stops_the_run() -> None:
    pytest.importorskip("openai")
    import json

    with bad.serving("ok-then-stall") as (url, _):
        proc, _ = _cli(
            "verify", "--url", url, "--model", bad.MODEL, "--only", "Chat", "--only", "ChatStream",
            "--first-token-timeout", "60", "--deadline", "6", "--json",
        )  # fmt: skip
    assert proc.returncode == 3, (proc.stdout, proc.stderr)
    doc = json.loads(proc.stdout)
    assert [(c["check"], c["severity"]) for c in doc["checks"]] == [("Chat", "ok")]
    assert doc["passed"] is False and doc["error"]["code"] == 3
    assert doc["error"]["message"] == "--deadline reached during check ChatStream"
    assert "--deadline reached during check ChatStream" in proc.stderr and "Traceback" not in proc.stderr


def test_metadata_probe_has_its_own_short_timeout() -> None:
    # A port that accepts and never answers: GET /v1/models gives up after PROBE_S (5 s), not
    # after the generation timeouts or the --deadline.
    pytest.importorskip("openai")
    with bad.silent() as url:
        proc, _ = _cli("verify", "--url", url, "--model", bad.MODEL, "--deadline", "60")
    _one_line(proc, 5, "no reply within 5s", "model-list requests get a few seconds")


def _auth(request: dict) -> str | None:
    return next((v for k, v in request["headers"].items() if k.lower() == "authorization"), None)


@pytest.mark.parametrize("command", ["verify", "bench"])
def test_key_sent_only_when_given(command) -> None:
    pytest.importorskip("openai")
    extra = ["--only", "Chat"] if command == "verify" else ["-w", "code", "--reps", "1"]
    with bad.serving("ok") as (url, seen):
        base = [command, "--url", url, "--model", bad.MODEL, "--deadline", "20", *extra]
        _cli(*base, env={"OPENAI_API_KEY": "sk-ambient-canary"})
        ambient = [_auth(r) for r in seen]
        seen.clear()
        proc, _ = _cli(*base, "--api-key-env", "MY_ENDPOINT_KEY", env={"MY_ENDPOINT_KEY": "sk-chosen-canary"})
        chosen = [_auth(r) for r in seen]
    assert len(ambient) >= 2 and all("sk-ambient-canary" not in (h or "") for h in ambient)
    assert len(chosen) >= 2 and all(h == "Bearer sk-chosen-canary" for h in chosen)
    assert "sk-chosen-canary" not in proc.stdout + proc.stderr  # never printed
