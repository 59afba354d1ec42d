"""`sparkctl verify` against a real third-party server (`transformers serve`, CPU, tiny model).

That server implements most of the API but ignores json_schema, reports no cached tokens and
rejects `return_token_ids`; a random-weight model never calls a tool. Those checks must fail
with exactly that reason, and every other check must pass.
"""

from __future__ import annotations

import json
import subprocess
import sys

from sparkctl.findings import Severity
from sparkctl.verify.checks import CHECKS
from sparkctl.verify.runner import verify

EXPECTED_FAILURES = {
    # server ignores text.format / response_format: the model's free text is not JSON
    "StructuredOutputResponses": "output does not match the schema at (document): Invalid JSON",
    "StructuredOutputChat": "output does not match the schema at (document): Invalid JSON",
    # Responses usage is zero-filled; chat usage has no prompt_tokens_details at all
    "PrefixCacheResponses": "usage.input_tokens_details.cached_tokens = 0 on the repeated",
    "PrefixCacheChat": "usage.prompt_tokens_details.cached_tokens is missing on the repeated",
    "StreamTokenIds": "HTTP 422: Unexpected fields in the request: {'return_token_ids'}",
    # tool_choice is ignored by this server and random weights never emit <tool_call>
    "ToolRoundTrip": "no function_call item in the output",
}


def test_verify_passes_supported_features_and_names_each_failure(server) -> None:
    findings = {f.check: f for f in verify(server.url, server.model)}
    assert list(findings) == [c.name for c in CHECKS]
    for name, finding in findings.items():
        if name in EXPECTED_FAILURES:
            assert finding.severity == Severity.ERROR, name
            assert finding.message.startswith(EXPECTED_FAILURES[name]), (name, finding.message)
            assert finding.fix, name  # says what a failure usually means
        else:
            assert finding.severity == Severity.OK, (name, finding.message)
    assert findings["ModelsList"].data["models"] == [server.model]
    assert [f for f in findings if f.startswith("ResponsesEffort[")] == [
        f"ResponsesEffort[{e}]" for e in ("none", "minimal", "low", "medium", "high", "xhigh", "max")
    ]
    cache = findings["PrefixCacheResponses"].data
    assert cache["cached_tokens"] == [0, 0] and cache["prompt_tokens"][0] == cache["prompt_tokens"][1] > 1000


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sparkctl", *args], capture_output=True, text=True, timeout=600
    )


def test_verify_cli_json_and_exit_codes(server) -> None:
    ok = _cli(
        "verify",
        "--url",
        server.url,
        "--model",
        server.model,
        "--only",
        "ModelsList",
        "--only",
        "ChatStream",
        "--json",
    )
    assert ok.returncode == 0, ok.stderr
    data = json.loads(ok.stdout)
    assert data["passed"] is True and data["config_hash"] is None
    assert [c["check"] for c in data["checks"]] == ["ModelsList", "ChatStreamUsage"]
    assert all(c["severity"] == "ok" and c["data"]["proves"] for c in data["checks"])

    bad = _cli("verify", "--url", server.url, "--model", server.model, "--only", "StreamTokenIds")
    assert bad.returncode == 1
    assert "FAIL StreamTokenIds" in bad.stdout and "HTTP 422" in bad.stdout
    assert "Traceback" not in bad.stdout + bad.stderr

    wrong = _cli("verify", "--url", server.url, "--model", "no/such-model", "--only", "ModelsList")
    assert wrong.returncode == 1 and "'no/such-model' not in /v1/models" in wrong.stdout
