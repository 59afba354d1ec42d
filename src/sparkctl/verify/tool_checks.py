"""Function tools on the Responses API: tool_choice honoured, arguments valid against the declared
schema (a real JSON Schema validator), and the tool's result shaping the next answer."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from sparkctl.verify.base import CheckFailed, Context, Passed, output_types, user, validate
from sparkctl.verify.responses_checks import create

WEATHER_PARAMS = {
    "type": "object",
    "properties": {"city": {"type": "string", "minLength": 1}},
    "required": ["city"],
    "additionalProperties": False,
}
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": WEATHER_PARAMS,
    "strict": True,
}
TIME_TOOL = {
    "type": "function",
    "name": "get_time",
    "description": "Current time in a city.",
    "parameters": WEATHER_PARAMS,
    "strict": True,
}
ASK = [user("What is the weather in Paris? Use the get_weather tool.")]


def _calls(r: Any) -> list[Any]:
    return [item for item in r.output or [] if item.type == "function_call"]


def _ask(ctx: Context, tool_choice: Any) -> Any:
    return create(
        ctx,
        f"tool_choice={tool_choice}",
        input=ASK,
        tools=[WEATHER_TOOL, TIME_TOOL],
        tool_choice=tool_choice,
        max_output_tokens=64,
    )


def _valid_call(call: Any) -> dict:
    """The call names a declared tool and its arguments satisfy that tool's strict schema."""
    if call.name not in ("get_weather", "get_time"):
        raise CheckFailed(f"called an undeclared tool '{call.name}'")
    try:
        args = json.loads(call.arguments)
    except ValueError:
        raise CheckFailed(f"{call.name} arguments are not JSON: {call.arguments!r}") from None
    validate(args, WEATHER_PARAMS, f"{call.name} arguments {call.arguments}")
    return args


def tool_choice_none(ctx: Context) -> Passed:
    r = _ask(ctx, "none")
    if calls := _calls(r):
        raise CheckFailed(
            f"tool_choice='none' ignored: the reply calls {calls[0].name}({calls[0].arguments})"
        )
    return Passed(f"no tool call, items {output_types(r)}")


def tool_choice_auto(ctx: Context) -> Passed:
    r = _ask(ctx, "auto")
    calls = _calls(r)
    for call in calls:
        _valid_call(call)
    return Passed(f"{len(calls)} valid tool call(s)" if calls else f"answered in text ({output_types(r)})")


def tool_choice_required(ctx: Context) -> Passed:
    r = _ask(ctx, "required")
    calls = _calls(r)
    if not calls:
        raise CheckFailed(f"tool_choice='required' ignored: no function_call (items {output_types(r)})")
    args = _valid_call(calls[0])
    return Passed(f"{calls[0].name}({json.dumps(args)})")


def tool_choice_named(ctx: Context) -> Passed:
    r = _ask(ctx, {"type": "function", "name": "get_time"})
    calls = _calls(r)
    if not calls:
        raise CheckFailed(f"tool_choice naming get_time ignored: no function_call (items {output_types(r)})")
    if calls[0].name != "get_time":
        raise CheckFailed(f"tool_choice named get_time but the reply calls {calls[0].name}")
    _valid_call(calls[0])
    return Passed(f"get_time({calls[0].arguments})")


def tool_round_trip(ctx: Context) -> Passed:
    """Call, validate, answer with a result holding a fresh code word; the next answer must use it."""
    r1 = _ask(ctx, "required")
    calls = _calls(r1)
    if not calls:
        raise CheckFailed(f"no function_call to answer (items {output_types(r1)})")
    call = calls[0]
    _valid_call(call)
    word = f"zx{ctx.nonce[:6]}"  # fresh per run; fixed when a test fixes the nonce
    result = {
        "type": "function_call_output",
        "call_id": call.call_id,
        "output": json.dumps({"city": "Paris", "conditions": word}),
    }
    follow = user("Repeat the conditions the tool reported, verbatim.")
    r2 = create(
        ctx, "turn 2", input=[*ASK, *r1.output, result, follow], tools=[WEATHER_TOOL], max_output_tokens=64
    )
    if word not in (r2.output_text or ""):
        raise CheckFailed(
            f"the tool result ({word!r}) did not reach the answer: {(r2.output_text or '')[:80]!r}"
        )
    return Passed(f"{call.name}({call.arguments}) -> result used in the answer")


# ----- the same on Chat Completions (tool_calls on the message, results as role "tool") -----

CHAT_TOOL = {"type": "function", "function": {k: v for k, v in WEATHER_TOOL.items() if k != "type"}}


def _chat_ask(ctx: Context, tool_choice: Any, messages: list | None = None) -> Any:
    from sparkctl.verify.base import require_object

    r = ctx.client.chat.completions.create(
        model=ctx.model, messages=messages or ASK, tools=[CHAT_TOOL], tool_choice=tool_choice, max_tokens=64
    )
    return require_object(r, "chat.completion", f"tool_choice={tool_choice}").choices[0].message


def _chat_valid_call(msg: Any) -> Any:
    calls = msg.tool_calls or []
    if not calls:
        raise CheckFailed(
            f"tool_choice='required' ignored: no tool_calls (content {(msg.content or '')[:60]!r})"
        )
    fn = calls[0].function
    _valid_call(SimpleNamespace(name=fn.name, arguments=fn.arguments))
    return calls[0]


def chat_tool_choice_none(ctx: Context) -> Passed:
    msg = _chat_ask(ctx, "none")
    if msg.tool_calls:
        fn = msg.tool_calls[0].function
        raise CheckFailed(f"tool_choice='none' ignored: the reply calls {fn.name}({fn.arguments})")
    return Passed("no tool call")


def chat_tool_round_trip(ctx: Context) -> Passed:
    """tool_choice='required': a schema-valid call; its result (a fresh code word) must reach the answer."""
    msg = _chat_ask(ctx, "required")
    call = _chat_valid_call(msg)
    word = f"zx{ctx.nonce[:6]}"  # fresh per run; fixed when a test fixes the nonce
    history = [
        *ASK,
        {
            "role": "assistant",
            "content": msg.content or "",
            "tool_calls": [call.model_dump(exclude_none=True)],
        },
        {
            "role": "tool",
            "tool_call_id": call.id,
            "content": json.dumps({"city": "Paris", "conditions": word}),
        },
        user("Repeat the conditions the tool reported, verbatim."),
    ]
    answer = _chat_ask(ctx, "none", history).content or ""
    if word not in answer:
        raise CheckFailed(f"the tool result ({word!r}) did not reach the answer: {answer[:80]!r}")
    return Passed(f"{call.function.name}({call.function.arguments}) -> result used in the answer")
