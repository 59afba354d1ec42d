"""The endpoint checks, in the order `verify` runs them, each with its verdict level.

contract checks test the OpenAI API (a failure is `fail`, exit 1); optional checks test vendor
extensions and optional features (a failure is `warn`; `--strict` makes it a failure). Every
check has a test that makes it fail through a fault-injecting proxy (tests/server/proxy.py).
"""

from __future__ import annotations

from sparkctl.verify import chat_checks as c
from sparkctl.verify import responses_checks as r
from sparkctl.verify import tool_checks as t
from sparkctl.verify.base import Check, CheckFailed, Context, Passed  # noqa: F401 - re-exported

_IMAGE = "the server image predates the fix (upgrade the SGLang image)"
_SDK = "the server streams (or sends text) when `stream` is absent: fix the server's default"
_TOOLS = "no --tool-call-parser (or the wrong one) for this model, or tool_choice ignored"

CHECKS: list[Check] = [
    Check(
        "Chat",
        "contract",
        "a default chat call (no stream argument) answers with text and usage",
        "the model failed to load or generate; read the container log",
        c.chat,
    ),
    Check(
        "ChatStream",
        "contract",
        "streaming chat sends text deltas, a finish_reason and usage (include_usage)",
        "server ignores stream_options.include_usage; token rates can only be guessed",
        c.chat_stream,
    ),
    Check(
        "MaxTokens",
        "contract",
        "max_tokens stops generation at the limit with finish_reason 'length'",
        "server ignores max_tokens",
        c.token_limit("max_tokens"),
    ),
    Check(
        "MaxCompletionTokens",
        "contract",
        "max_completion_tokens (the current name) stops generation",
        "server only knows the deprecated max_tokens",
        c.token_limit("max_completion_tokens"),
    ),
    Check(
        "StructuredOutputChat",
        "contract",
        "response_format json_schema output validates against the schema",
        "server ignores response_format json_schema (no grammar backend)",
        c.structured_chat,
    ),
    Check(
        "ResponsesDefault",
        "contract",
        "a default /v1/responses call (no stream argument) returns a response",
        _SDK,
        r.responses_default,
    ),
    Check(
        "ResponsesStream",
        "contract",
        "streaming Responses sends output_text deltas and response.completed",
        f"{_IMAGE}, or a server without streaming Responses",
        r.responses_stream,
    ),
    Check(
        "MaxOutputTokens",
        "contract",
        "max_output_tokens honoured (with instructions, temperature, top_p)",
        "server rejects sampling params or ignores max_output_tokens",
        r.max_output_tokens,
    ),
    Check(
        "EffortValidated",
        "contract",
        "reasoning.effort='bogus' is rejected (HTTP 400)",
        "server accepts any effort value: it probably ignores reasoning.effort",
        r.effort_bogus,
    ),
    Check(
        "EffortEffect",
        "contract",
        "reasoning.effort none/low/high change the reasoning observably",
        f"no --reasoning-parser for this model, or {_IMAGE}",
        r.effort_effect,
    ),
    Check(
        "MultiTurnTypedHistory",
        "contract",
        "the SDK's typed output items go back as history and reach the model",
        f"{_IMAGE}: older endpoints rejected SDK-echoed assistant items",
        r.multi_turn_typed_history,
    ),
    Check(
        "StructuredOutputResponses",
        "contract",
        "text.format json_schema output validates against the schema",
        f"server ignores text.format json_schema ({_IMAGE}, or no grammar backend)",
        r.structured_responses,
    ),
    Check("ToolChoiceNone", "contract", "tool_choice='none': no tool call", _TOOLS, t.tool_choice_none),
    Check(
        "ToolChoiceAuto",
        "contract",
        "tool_choice='auto': text, or calls whose arguments match the schema",
        _TOOLS,
        t.tool_choice_auto,
    ),
    Check(
        "ToolChoiceRequired",
        "contract",
        "tool_choice='required': a call with schema-valid arguments",
        _TOOLS,
        t.tool_choice_required,
    ),
    Check(
        "ToolChoiceNamed",
        "contract",
        "tool_choice naming a function: that function is called",
        _TOOLS,
        t.tool_choice_named,
    ),
    Check(
        "ToolRoundTrip",
        "contract",
        "a function_call_output goes back in and shapes the next answer",
        _TOOLS,
        t.tool_round_trip,
    ),
    Check(
        "ChatToolChoiceNone",
        "contract",
        "chat tool_choice='none' with tools offered: no tool_calls",
        _TOOLS,
        t.chat_tool_choice_none,
    ),
    Check(
        "ChatToolRoundTrip",
        "contract",
        "chat tool_choice='required': schema-valid tool_calls; a role 'tool' result shapes the answer",
        _TOOLS,
        t.chat_tool_round_trip,
    ),
    Check(
        "ThinkingSwitch",
        "optional",
        "chat_template_kwargs enable_thinking reaches the chat template",
        "server drops chat_template_kwargs, or the reasoning parser is missing",
        c.thinking_switch,
    ),
    Check(
        "PrefixCacheResponses",
        "optional",
        "a repeated long prompt reports cached tokens (Responses usage)",
        "no --enable-cache-report, radix cache disabled, or usage in chat shape",
        r.prefix_cache_responses,
    ),
    Check(
        "PrefixCacheChat",
        "optional",
        "a repeated long prompt reports cached tokens (chat usage)",
        "no --enable-cache-report, or the radix (prefix) cache is disabled",
        c.prefix_cache_chat,
    ),
    Check(
        "StreamTokenIds",
        "optional",
        "streaming return_token_ids returns exactly usage.completion_tokens ids",
        "server rejects return_token_ids (not SGLang, or an image that predates it)",
        c.stream_token_ids,
    ),
]


def select(names: list[str] | None) -> list[Check]:
    """Checks whose name starts with any of `names` (case-insensitive); all when None."""
    if not names:
        return list(CHECKS)
    wanted = [n.lower() for n in names]
    return [ch for ch in CHECKS if any(ch.name.lower().startswith(w) for w in wanted)]
