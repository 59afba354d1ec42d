"""No check passes under its own fault. Through the fault-injecting proxy, each check runs once
with the feature it names present (supplied by the proxy where the tiny CPU server lacks it) and
once with exactly that feature broken; the verdicts must be pass and then warn/fail."""

from __future__ import annotations

import time

import pytest

from sparkctl.clients.api import make_client
from sparkctl.findings import Severity
from sparkctl.verify.base import Context
from sparkctl.verify.checks import CHECKS
from sparkctl.verify.runner import run_check

OK = Severity.OK
ND = "nonstream_default"  # the tiny server streams when `stream` is absent: repaired for these checks

# (check, mutations that give the feature, mutations that then break it)
CASES = [
    ("Chat", [], ["chat_empty"]),
    ("Chat", [], ["null_finish"]),
    ("ChatStream", [], ["stream_no_text"]),
    ("ChatStream", [], ["stream_no_usage"]),
    ("ChatStream", [], ["buffered"]),  # the whole body at the end: not incremental
    ("ChatStream", [], ["duplicated"]),  # every delta twice: more text events than tokens
    ("ChatStream", [], ["cut"]),  # broken off mid-way: named as a cut stream, not a connection error
    ("MaxTokens", [], ["raise_limits"]),
    ("MaxCompletionTokens", ["fix_max_completion_tokens"], ["fix_max_completion_tokens", "raise_limits"]),
    ("StructuredOutputChat", ["valid_json"], ["invalid_json"]),
    ("ResponsesDefault", [ND], []),  # broken: the server's own default (no stream argument)
    ("ResponsesStream", [], ["responses_no_completed"]),
    ("ResponsesStream", [], ["responses_no_delta"]),
    ("MaxOutputTokens", [ND], [ND, "raise_limits"]),
    ("MaxOutputTokens", [ND], []),  # the default call streams: fails even with the limit honoured
    ("EffortValidated", [ND, "effort_400"], [ND]),
    ("EffortEffect", [ND, "fake_reasoning"], [ND, "effort_ignored", "fake_reasoning"]),
    ("MultiTurnTypedHistory", [ND], [ND, "drop_history"]),
    ("StructuredOutputResponses", [ND, "responses_valid_json"], [ND, "responses_invalid_json"]),
    ("ToolChoiceNone", [ND], [ND, "call_anyway"]),
    ("ToolChoiceAuto", [ND, "fake_tools"], [ND, "bad_tool_args"]),
    ("ToolChoiceRequired", [ND, "fake_tools"], [ND, "bad_tool_args"]),
    ("ToolChoiceNamed", [ND, "fake_tools"], [ND, "wrong_tool"]),
    ("ToolRoundTrip", [ND, "fake_tools"], [ND, "lose_tool_result", "fake_tools"]),
    ("ToolRoundTrip", [ND, "fake_tools"], [ND, "bad_tool_args"]),
    ("ChatToolChoiceNone", [], ["chat_call_anyway"]),
    ("ChatToolRoundTrip", ["chat_fake_tools"], ["chat_bad_tool_args"]),  # "city": "" breaks minLength
    ("ChatToolRoundTrip", ["chat_fake_tools"], ["chat_lose_tool_result", "chat_fake_tools"]),
    ("ThinkingSwitch", [], ["strip_thinking_kwargs"]),
    ("PrefixCacheResponses", [ND, "cache_report"], [ND, "cache_report", "cache_zero"]),
    ("PrefixCacheChat", ["cache_report"], ["cache_report", "cache_zero"]),
    ("StreamTokenIds", ["fake_token_ids"], ["fake_token_ids", "short_token_ids"]),
    ("StreamTokenIds", ["fake_token_ids"], ["fake_token_ids", "stream_no_usage_completions"]),
]
BY_NAME = {c.name: c for c in CHECKS}


def _run(proxy, server, name: str, mutations: list[str]):
    # A fixed nonce makes every prompt, and so the random-weight model's greedy output, the same
    # on every run: some outputs make this server's tool parser answer HTTP 500.
    client = make_client(proxy.base(*mutations), timeout_s=60)
    ctx = Context(client=client, model=server.model, nonce="5eed5eed5eed")
    return run_check(BY_NAME[name], ctx, time.monotonic() + 300)


def test_every_check_has_a_fault_that_fails_it() -> None:
    assert {name for name, _, _ in CASES} == set(BY_NAME)


def _id(case: tuple) -> str:
    name, good, bad = case
    return f"{name}-" + (
        "+".join(m for m in bad if m not in good) or "-".join(m for m in good if m not in bad)
    )


@pytest.mark.parametrize(("name", "good", "bad"), CASES, ids=[_id(c) for c in CASES])
def test_check_passes_with_the_feature_and_fails_under_its_fault(proxy, server, name, good, bad) -> None:
    with_feature = _run(proxy, server, name, good)
    assert with_feature.severity == OK, (name, good, with_feature.message)
    broken = _run(proxy, server, name, bad)
    expected = Severity.ERROR if BY_NAME[name].level == "contract" else Severity.WARN
    assert broken.severity == expected, (name, bad, broken.message)
    assert not broken.message.startswith("HTTP"), broken.message  # the check's own judgement, not an error
    assert broken.fix, name
