"""The endpoint checks. Each one calls the server through the official `openai` SDK exactly as a
user's program would, and says what passing proves and what failing usually means.

A check returns a one-line summary (and optional data) on success and raises `CheckFailed` with
what was seen otherwise; any SDK exception is reported verbatim by the runner.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")

# Enough for an answer, small enough that a slow server finishes every check quickly.
MAX_TOKENS = 24


class CheckFailed(Exception):
    """The server answered, but not as an OpenAI-compatible server must."""

    def __init__(self, message: str, data: dict | None = None) -> None:
        super().__init__(message)
        self.data = data or {}


@dataclass
class Context:
    client: Any  # openai.OpenAI
    model: str
    max_tokens: int = MAX_TOKENS
    long_prompt_words: int = 1500  # ~2k tokens: many 64-token cache pages
    nonce: str = field(default_factory=lambda: uuid.uuid4().hex[:12])  # fresh prefix per run


@dataclass
class Passed:
    summary: str
    data: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Check:
    name: str  # stable, e.g. "ChatStreamUsage" or "ResponsesEffort[high]"
    proves: str
    usual_cause: str  # what a failure usually means: becomes the finding's fix
    run: Callable[[Context], Passed]


# ----- helpers -----


def _get(obj: Any, *path: str) -> Any:
    """Walk attributes/keys, None when missing: servers differ in which usage fields they send."""
    for name in path:
        if obj is None:
            return None
        obj = obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)
    return obj


def _extra(obj: Any, name: str) -> Any:
    """A non-OpenAI field (e.g. `reasoning_content`) the SDK keeps in `model_extra`."""
    extra = getattr(obj, "model_extra", None) or {}
    return extra[name] if name in extra else getattr(obj, name, None)


def _responses_usage(resp: Any, where: str) -> tuple[int, int]:
    usage = resp.usage
    if usage is None:
        raise CheckFailed(f"{where}: response has no usage")
    inp, out = _get(usage, "input_tokens"), _get(usage, "output_tokens")
    if inp is None or out is None:
        raise CheckFailed(
            f"{where}: usage is not in Responses shape (input_tokens/output_tokens missing; got "
            f"{sorted(k for k, v in usage.model_dump().items() if v is not None)})"
        )
    return inp, out


def _output_types(resp: Any) -> list[str]:
    return [item.type for item in resp.output or []]


def _user(text: str) -> dict:
    return {"role": "user", "content": text}


def _long_prompt(ctx: Context, api: str) -> str:
    from sparkctl.benchmark.workloads import filler

    return filler(ctx.long_prompt_words, seed=f"[{api} {ctx.nonce}] Reply with the first word of this list.")


# ----- checks -----


def models_list(ctx: Context) -> Passed:
    ids = [m.id for m in ctx.client.models.list()]
    if ctx.model not in ids:
        raise CheckFailed(f"'{ctx.model}' not in /v1/models: {ids}", {"models": ids})
    return Passed(f"/v1/models lists '{ctx.model}'", {"models": ids})


def chat(ctx: Context) -> Passed:
    r = ctx.client.chat.completions.create(
        model=ctx.model, messages=[_user("Say hello.")], max_tokens=ctx.max_tokens
    )
    if not r.choices:
        raise CheckFailed("no choices in the reply")
    msg = r.choices[0].message
    if not (msg.content or msg.tool_calls or _extra(msg, "reasoning_content")):
        raise CheckFailed("empty message")
    if r.usage is None or not r.usage.completion_tokens:
        raise CheckFailed(f"usage missing or zero completion_tokens: {r.usage}")
    return Passed(
        f"{r.usage.completion_tokens} tokens, finish_reason={r.choices[0].finish_reason}",
        {"usage": r.usage.model_dump()},
    )


def chat_stream_usage(ctx: Context) -> Passed:
    stream = ctx.client.chat.completions.create(
        model=ctx.model,
        messages=[_user("Count from one to ten.")],
        max_tokens=ctx.max_tokens,
        stream=True,
        stream_options={"include_usage": True},
    )
    events, usage = 0, None
    with stream:
        for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for ch in chunk.choices:
                if ch.delta.content or _extra(ch.delta, "reasoning_content"):
                    events += 1
    if usage is None:
        raise CheckFailed("no chunk carried usage despite stream_options.include_usage")
    if not usage.completion_tokens:
        raise CheckFailed(f"usage.completion_tokens is {usage.completion_tokens}")
    # More tokens than events means the server packs tokens per SSE event (stream-interval > 1
    # or speculative decoding): chunk-counting clients would under-report tok/s.
    per_event = usage.completion_tokens / events if events else float("inf")
    return Passed(
        f"usage on stream: {usage.completion_tokens} tokens in {events} text events "
        f"({per_event:.2f} tokens/event)",
        {"usage": usage.model_dump(), "text_events": events},
    )


def thinking_off(ctx: Context) -> Passed:
    r = ctx.client.chat.completions.create(
        model=ctx.model,
        messages=[_user("What is two plus two?")],
        max_tokens=ctx.max_tokens,
        extra_body={"chat_template_kwargs": {"enable_thinking": False}},
    )
    msg = r.choices[0].message
    reasoning = _extra(msg, "reasoning_content")
    if reasoning:
        raise CheckFailed(f"reasoning_content present with thinking off: {reasoning[:80]!r}")
    if msg.content and "<think>" in msg.content:
        raise CheckFailed("'<think>' in content with thinking off")
    if not msg.content:
        raise CheckFailed("empty content")
    return Passed(f"answered without reasoning ({r.usage.completion_tokens} tokens)")


def responses_effort(effort: str) -> Callable[[Context], Passed]:
    def run(ctx: Context) -> Passed:
        kw: dict[str, Any] = dict(
            model=ctx.model,
            input="Name one prime number.",
            reasoning={"effort": effort},
            max_output_tokens=ctx.max_tokens,
        )
        r = ctx.client.responses.create(**kw, stream=False)
        if r.status not in ("completed", "incomplete"):
            raise CheckFailed(f"non-streaming: status={r.status} error={r.error}")
        _, out = _responses_usage(r, "non-streaming")
        completed = None
        with ctx.client.responses.create(**kw, stream=True) as stream:
            for event in stream:
                if event.type in ("response.completed", "response.incomplete"):
                    completed = event.response
                elif event.type in ("response.failed", "error"):
                    raise CheckFailed(f"streaming: {event.type}: {_get(event, 'response', 'error') or event}")
        if completed is None:
            raise CheckFailed("streaming: no response.completed event")
        _, sout = _responses_usage(completed, "streaming")
        return Passed(f"non-streaming {out} tokens, streaming {sout} tokens")

    return run


def multi_turn_typed_history(ctx: Context) -> Passed:
    first = [_user("Pick a colour.")]
    r1 = ctx.client.responses.create(
        model=ctx.model, input=first, max_output_tokens=ctx.max_tokens, stream=False
    )
    if not r1.output:
        raise CheckFailed("turn 1 returned no output items")
    # The SDK's own pydantic output items go back verbatim: what agents and the SDK examples do.
    history = [*first, *r1.output, _user("Now pick another one.")]
    r2 = ctx.client.responses.create(
        model=ctx.model, input=history, max_output_tokens=ctx.max_tokens, stream=False
    )
    if r2.status not in ("completed", "incomplete"):
        raise CheckFailed(f"turn 2: status={r2.status} error={r2.error}")
    _responses_usage(r2, "turn 2")
    return Passed(f"turn 2 accepted history of {_output_types(r1)} and answered ({_output_types(r2)})")


_WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}


def tool_round_trip(ctx: Context) -> Passed:
    first = [_user("What is the weather in Paris? Use the get_weather tool.")]
    r1 = ctx.client.responses.create(
        model=ctx.model,
        input=first,
        tools=[_WEATHER_TOOL],
        tool_choice="required",
        max_output_tokens=max(ctx.max_tokens, 64),
        stream=False,
    )
    calls = [item for item in r1.output or [] if item.type == "function_call"]
    if not calls:
        text = (r1.output_text or "")[:80]
        raise CheckFailed(f"no function_call item in the output (items {_output_types(r1)}, text {text!r})")
    call = calls[0]
    if call.name != "get_weather":
        raise CheckFailed(f"called unknown tool '{call.name}'")
    try:
        json.loads(call.arguments)
    except ValueError as exc:
        raise CheckFailed(f"tool arguments are not JSON: {call.arguments!r}") from exc
    result = {
        "type": "function_call_output",
        "call_id": call.call_id,
        "output": json.dumps({"city": "Paris", "temperature_c": 18, "conditions": "sunny"}),
    }
    r2 = ctx.client.responses.create(
        model=ctx.model,
        input=[*first, *r1.output, result],
        tools=[_WEATHER_TOOL],
        max_output_tokens=ctx.max_tokens,
        stream=False,
    )
    if r2.status not in ("completed", "incomplete"):
        raise CheckFailed(f"turn 2: status={r2.status} error={r2.error}")
    return Passed(f"get_weather({call.arguments}) -> result accepted -> {_output_types(r2)}")


_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "temperature_c": {"type": "integer"},
        "conditions": {"type": "string", "enum": ["sunny", "cloudy", "rain"]},
    },
    "required": ["city", "temperature_c", "conditions"],
    "additionalProperties": False,
}


def _validate_schema(text: str) -> dict:
    """Validate against `_SCHEMA` with a pydantic model equal to it (no extra dependency)."""
    from pydantic import BaseModel, ConfigDict, ValidationError

    class Weather(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)
        city: str
        temperature_c: int
        conditions: Literal["sunny", "cloudy", "rain"]

    try:
        return Weather.model_validate_json(text).model_dump()
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(document)"
        raise CheckFailed(
            f"output does not match the schema at {where}: {first['msg']}; output {text[:80]!r}"
        ) from None


def structured_responses(ctx: Context) -> Passed:
    r = ctx.client.responses.create(
        model=ctx.model,
        input="Report the weather in Paris as JSON.",
        text={"format": {"type": "json_schema", "name": "weather", "schema": _SCHEMA, "strict": True}},
        max_output_tokens=max(ctx.max_tokens, 64),
        stream=False,
    )
    return Passed(f"valid: {_validate_schema(r.output_text or '')}")


def structured_chat(ctx: Context) -> Passed:
    r = ctx.client.chat.completions.create(
        model=ctx.model,
        messages=[_user("Report the weather in Paris as JSON.")],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "weather", "schema": _SCHEMA, "strict": True},
        },
        max_tokens=max(ctx.max_tokens, 64),
    )
    return Passed(f"valid: {_validate_schema(r.choices[0].message.content or '')}")


def instructions_sampling(ctx: Context) -> Passed:
    limit = 8
    r = ctx.client.responses.create(
        model=ctx.model,
        instructions="You answer in one word.",
        input="Which planet is closest to the sun?",
        temperature=0.6,
        top_p=0.9,
        max_output_tokens=limit,
        stream=False,
    )
    if r.status not in ("completed", "incomplete"):
        raise CheckFailed(f"status={r.status} error={r.error}")
    _, out = _responses_usage(r, "reply")
    if not 0 < out <= limit:
        raise CheckFailed(f"max_output_tokens={limit} not honoured: {out} output tokens")
    return Passed(f"{out} tokens (<= max_output_tokens {limit}), status {r.status}")


def prefix_cache_responses(ctx: Context) -> Passed:
    prompt = _long_prompt(ctx, "responses")
    seen = []
    for _ in range(2):
        r = ctx.client.responses.create(model=ctx.model, input=prompt, max_output_tokens=1, stream=False)
        inp, _ = _responses_usage(r, "reply")
        details = _get(r.usage, "input_tokens_details")
        if details is None:
            raise CheckFailed("usage has no input_tokens_details")
        seen.append((inp, _get(details, "cached_tokens")))
    return _judge_cache(seen, "usage.input_tokens_details.cached_tokens")


def prefix_cache_chat(ctx: Context) -> Passed:
    messages = [_user(_long_prompt(ctx, "chat"))]
    seen = []
    for _ in range(2):
        r = ctx.client.chat.completions.create(model=ctx.model, messages=messages, max_tokens=1)
        seen.append((r.usage.prompt_tokens, _get(r.usage, "prompt_tokens_details", "cached_tokens")))
    return _judge_cache(seen, "usage.prompt_tokens_details.cached_tokens")


def _judge_cache(seen: list[tuple[int, int | None]], field_name: str) -> Passed:
    (p1, c1), (p2, c2) = seen
    data = {"prompt_tokens": [p1, p2], "cached_tokens": [c1, c2]}
    if c2 is None:
        raise CheckFailed(f"{field_name} is missing on the repeated {p2}-token prompt", data)
    if c2 <= 0:
        raise CheckFailed(f"{field_name} = {c2} on the repeated {p2}-token prompt", data)
    return Passed(f"repeat of a {p2}-token prompt: {c2} cached (first call {c1})", data)


def stream_token_ids(ctx: Context) -> Passed:
    # SGLang streams ids on /v1/completions (it rejects them with streaming chat by design).
    stream = ctx.client.completions.create(
        model=ctx.model,
        prompt="The capital of France is",
        max_tokens=ctx.max_tokens,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"return_token_ids": True},
    )
    ids: list[int] = []
    usage = None
    with stream:
        for chunk in stream:
            usage = chunk.usage or usage
            for ch in chunk.choices:
                ids.extend(_extra(ch, "token_ids") or [])
    if not ids:
        raise CheckFailed("stream carried no token_ids")
    if usage is not None and usage.completion_tokens != len(ids):
        raise CheckFailed(f"{len(ids)} token ids streamed but usage says {usage.completion_tokens}")
    return Passed(f"{len(ids)} token ids streamed" + (", equal to usage" if usage else ""))


_IMAGE = "the server image predates the fix (upgrade the SGLang image)"

CHECKS: list[Check] = [
    Check(
        "ModelsList",
        "the server is up and serves the profile's model under its served name",
        "wrong --served-model-name, or another server holds the port",
        models_list,
    ),
    Check(
        "Chat",
        "non-streaming chat completions answer with usage",
        "the model failed to load or generate; read the container log",
        chat,
    ),
    Check(
        "ChatStreamUsage",
        "streaming chat reports exact token counts (tok/s from usage, not chunks)",
        "server ignores stream_options.include_usage; token rates can only be guessed",
        chat_stream_usage,
    ),
    Check(
        "ThinkingOff",
        "chat_template_kwargs reach the chat template (enable_thinking=false)",
        "server drops chat_template_kwargs, or the reasoning parser is missing",
        thinking_off,
    ),
    *[
        Check(
            f"ResponsesEffort[{e}]",
            f"/v1/responses accepts reasoning.effort={e!r}, streaming and not",
            f"{_IMAGE}: older Responses endpoints rejected or crashed on some effort tiers",
            responses_effort(e),
        )
        for e in EFFORTS
    ],
    Check(
        "MultiTurnTypedHistory",
        "the SDK's own typed output items are accepted back as history",
        f"{_IMAGE}: older endpoints rejected SDK-echoed assistant items",
        multi_turn_typed_history,
    ),
    Check(
        "ToolRoundTrip",
        "function tools: a typed function_call comes out and its output goes back in",
        "no --tool-call-parser (or the wrong one) for this model, or tool_choice ignored",
        tool_round_trip,
    ),
    Check(
        "StructuredOutputResponses",
        "text.format json_schema constrains Responses output",
        f"server ignores text.format json_schema ({_IMAGE}, or no grammar backend)",
        structured_responses,
    ),
    Check(
        "StructuredOutputChat",
        "response_format json_schema constrains chat output",
        "server ignores response_format json_schema (no grammar backend)",
        structured_chat,
    ),
    Check(
        "InstructionsSampling",
        "instructions, temperature, top_p and max_output_tokens are honoured",
        "server rejects sampling params or ignores max_output_tokens",
        instructions_sampling,
    ),
    Check(
        "PrefixCacheResponses",
        "a repeated long prompt reports cached tokens (Responses usage shape)",
        "server started without --enable-cache-report, radix cache disabled, or usage in chat shape",
        prefix_cache_responses,
    ),
    Check(
        "PrefixCacheChat",
        "a repeated long prompt reports cached tokens (chat usage shape)",
        "server started without --enable-cache-report, or the radix (prefix) cache is disabled",
        prefix_cache_chat,
    ),
    Check(
        "StreamTokenIds",
        "streaming with return_token_ids returns the exact generated ids",
        "server rejects return_token_ids (not SGLang, or an image that predates it)",
        stream_token_ids,
    ),
]


def select(names: list[str] | None) -> list[Check]:
    """Checks whose name starts with any of `names` (case-insensitive); all when None."""
    if not names:
        return list(CHECKS)
    wanted = [n.lower() for n in names]
    return [c for c in CHECKS if any(c.name.lower().startswith(w) for w in wanted)]
