"""`sparkctl verify` against a real third-party server (`transformers serve`, CPU, tiny model):
the verdicts that server really earns, each with its reason.

It streams /v1/responses when `stream` is absent (so every Responses check fails on the SDK's
default call), ignores max_completion_tokens, json_schema, reasoning.effort and tool_choice
(random weights never call a tool, on either API), reports no cached tokens and rejects `return_token_ids`.
"""

from __future__ import annotations

import json
import subprocess
import sys

from sparkctl.findings import Severity
from sparkctl.verify.checks import CHECKS
from sparkctl.verify.runner import verify

SDK = "the SDK's default call got an SSE stream back, not a response object"
EXPECTED = {
    "Chat": ("ok", ""),
    "ChatStream": ("ok", ""),
    "MaxTokens": ("ok", "5 tokens <= max_tokens 5, finish_reason=length"),
    "MaxCompletionTokens": ("error", "max_completion_tokens=5 not honoured"),
    "StructuredOutputChat": ("error", "the output is not JSON"),
    "ResponsesDefault": ("error", SDK),
    "ResponsesStream": ("ok", ""),
    "MaxOutputTokens": ("error", f"{SDK}; with stream=False it passes"),
    "EffortValidated": ("error", "reasoning.effort='bogus' accepted"),
    "EffortEffect": ("error", f"{SDK}; with stream=False: reasoning.effort none/low/high made no difference"),
    "MultiTurnTypedHistory": ("error", f"{SDK}; with stream=False it passes"),
    "StructuredOutputResponses": ("error", f"{SDK}; with stream=False: the output is not JSON"),
    "ToolChoiceNone": ("error", f"{SDK}; with stream=False it passes"),
    "ToolChoiceAuto": ("error", f"{SDK}; with stream=False it passes"),
    "ToolChoiceRequired": ("error", f"{SDK}; with stream=False: tool_choice='required' ignored"),
    "ToolChoiceNamed": ("error", f"{SDK}; with stream=False: tool_choice naming get_time ignored"),
    "ToolRoundTrip": ("error", f"{SDK}; with stream=False: no function_call to answer"),
    "ChatToolChoiceNone": ("ok", "no tool call"),
    "ChatToolRoundTrip": ("error", "tool_choice='required' ignored: no tool_calls"),
    "ThinkingSwitch": ("ok", "thinking on: "),
    "PrefixCacheResponses": (
        "warn",
        f"{SDK}; with stream=False: usage.input_tokens_details.cached_tokens = 0",
    ),
    "PrefixCacheChat": ("warn", "usage.prompt_tokens_details.cached_tokens is missing on the repeated"),
    "StreamTokenIds": ("warn", "HTTP 422: Unexpected fields in the request: {'return_token_ids'}"),
}


def test_verify_verdicts_are_what_the_server_earns(server) -> None:
    findings = {f.check: f for f in verify(server.url, server.model, deadline_s=600)}
    assert list(findings) == [c.name for c in CHECKS] == list(EXPECTED)
    for name, (severity, start) in EXPECTED.items():
        f = findings[name]
        assert (f.severity.value, f.message[: len(start)]) == (severity, start), (name, f.message)
        if severity != "ok":  # warn only for optional features, fail only for the API contract
            assert f.data["level"] == {"warn": "optional", "error": "contract"}[severity], name
        if f.severity != Severity.OK:
            assert f.fix, name  # says what a failure usually means


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sparkctl", *args], capture_output=True, text=True, timeout=600, env=env
    )


def test_verify_cli_exit_codes_warn_and_strict(server) -> None:
    base = ["verify", "--url", server.url, "--model", server.model]
    ok = _cli(*base, "--only", "ChatStream", "--only", "PrefixCacheChat", "--json")
    assert ok.returncode == 0, ok.stderr  # a warning alone does not fail
    data = json.loads(ok.stdout)
    assert data["passed"] is True and data["config_hash"] is None
    assert data["counts"] == {"ok": 1, "warn": 1, "error": 0}
    assert [(c["check"], c["severity"]) for c in data["checks"]] == [
        ("ChatStream", "ok"),
        ("PrefixCacheChat", "warn"),
    ]

    strict = _cli(*base, "--only", "PrefixCacheChat", "--strict")
    assert strict.returncode == 1 and "warn PrefixCacheChat" in strict.stdout

    bad = _cli(*base, "--only", "ResponsesDefault")
    assert bad.returncode == 1
    assert "FAIL ResponsesDefault" in bad.stdout and "SSE stream" in bad.stdout
    assert "Traceback" not in bad.stdout + bad.stderr
