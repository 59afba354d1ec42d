"""Chat Completions checks (and the vendor extensions reached through chat/completions)."""

from __future__ import annotations

from typing import Any

from sparkctl.clients.stream import Timed, burst, max_gap, median_gap, repeats, text_times
from sparkctl.verify.base import (
    CheckFailed,
    Context,
    Passed,
    drain,
    extra,
    get,
    long_prompt,
    parse_json,
    require_object,
    user,
    validate,
)


def _text(msg: object) -> str:
    return (get(msg, "content") or "") + (extra(msg, "reasoning_content") or "")


def chat(ctx: Context) -> Passed:
    # The SDK's default call: no stream argument, no limit but ours.
    r = ctx.client.chat.completions.create(
        model=ctx.model, messages=[user("Say hello.")], max_tokens=ctx.max_tokens
    )
    require_object(r, "chat.completion", "default call")
    if not r.choices:
        raise CheckFailed("no choices in the reply")
    msg = r.choices[0].message
    if not (_text(msg) or msg.tool_calls):
        raise CheckFailed("empty message")
    finish = r.choices[0].finish_reason
    if not finish:  # clients branch on it (stop, length, tool_calls): null breaks them
        raise CheckFailed(f"no finish_reason (got {finish!r}) on a finished reply")
    if r.usage is None or not r.usage.completion_tokens or not r.usage.prompt_tokens:
        raise CheckFailed(f"usage missing or zero: {r.usage}")
    return Passed(
        f"{r.usage.completion_tokens} tokens, finish_reason={finish}", {"usage": r.usage.model_dump()}
    )


def has_text(chunk: Any) -> bool:
    """A chat stream chunk that carries generated text (content or reasoning)."""
    return any(ch.delta.content or extra(ch.delta, "reasoning_content") for ch in chunk.choices or [])


_BUFFERED_FIX = (
    "something between the server and the client buffers the stream (nginx: proxy_buffering off), "
    "or the server does not flush per token; clients see the whole reply at once"
)
_DUPLICATED_FIX = "the server (or a proxy) sends each delta more than once: clients print the text twice"


def _one_stream(ctx: Context) -> tuple[Timed, int, Any, Any]:
    timed = drain(
        ctx,
        lambda **kw: ctx.client.chat.completions.create(
            model=ctx.model,
            messages=[user("Count from one to ten.")],
            max_tokens=ctx.max_tokens,
            stream=True,
            stream_options={"include_usage": True},
            **kw,
        ),
        has_text,
    )
    events = visible = 0
    usage = finish = None
    for chunk in timed.events:
        usage = chunk.usage or usage
        for ch in chunk.choices:
            finish = ch.finish_reason or finish
            text = (ch.delta.content or "") + (extra(ch.delta, "reasoning_content") or "")
            events += bool(text)
            visible += bool(text.strip())
    if not events:
        raise CheckFailed("the stream carried no text deltas")
    if finish is None:
        raise CheckFailed(f"{events} text events but no finish_reason")
    if usage is None or not usage.completion_tokens:
        raise CheckFailed(f"no usage on the stream despite stream_options.include_usage ({usage})")
    if why := repeats(visible, usage.completion_tokens):
        raise CheckFailed(why, fix=_DUPLICATED_FIX)
    return timed, events, usage, finish


def chat_stream(ctx: Context) -> Passed:
    """Text deltas, a finish_reason, usage, no repeated deltas, and text that arrives as it is
    generated. A burst is asked again once: a healthy server can have one slow flush."""
    for attempt in (1, 2):
        timed, events, usage, finish = _one_stream(ctx)
        times = text_times(timed, has_text)
        gap = max_gap(times)
        why = burst(usage.completion_tokens, times[0], times[-1] - times[0], median_gap(times))
        if why is None:
            break
        if attempt == 2:
            raise CheckFailed(f"the stream is not incremental (twice): {why}", fix=_BUFFERED_FIX)
    # More tokens than events: the server packs tokens per SSE event (stream interval > 1 or
    # speculative decoding); chunk-counting clients under-report tok/s.
    data = {"text_events": events, "first_text_s": round(times[0], 4), "end_s": round(timed.end_s, 4)}
    return Passed(
        f"{usage.completion_tokens} tokens in {events} text events over {timed.end_s - times[0]:.2f}s "
        f"(longest gap {gap * 1000:.0f} ms), finish_reason={finish}",
        {"usage": usage.model_dump(), "max_gap_s": round(gap, 4), **data},
    )


def token_limit(param: str) -> object:
    """`max_tokens` / `max_completion_tokens`: a small limit must stop generation there."""

    def run(ctx: Context) -> Passed:
        limit = 5
        r = ctx.client.chat.completions.create(
            model=ctx.model, messages=[user("Write a long story about a lighthouse.")], **{param: limit}
        )
        require_object(r, "chat.completion", "default call")
        got = get(r, "usage", "completion_tokens")
        finish = r.choices[0].finish_reason if r.choices else None
        if got is None or got > limit:
            raise CheckFailed(
                f"{param}={limit} not honoured: {got} completion tokens (finish_reason={finish})"
            )
        if got == limit and finish != "length":
            raise CheckFailed(f"stopped at the {param} limit but finish_reason={finish!r}, not 'length'")
        return Passed(f"{got} tokens <= {param} {limit}, finish_reason={finish}")

    return run


def thinking_switch(ctx: Context) -> Passed:
    """enable_thinking must change what the model sees: reasoning on/off, or at least the prompt
    the chat template renders (a template closes an empty think block when it is off)."""
    seen = {}
    for on in (True, False):
        r = ctx.client.chat.completions.create(
            model=ctx.model,
            messages=[user("What is two plus two?")],
            max_tokens=ctx.max_tokens,
            extra_body={"chat_template_kwargs": {"enable_thinking": on}},
        )
        msg = r.choices[0].message
        think = (extra(msg, "reasoning_content") or "").strip() or "<think>" in (msg.content or "")
        seen[on] = (get(r, "usage", "prompt_tokens"), bool(think))
    (p_on, r_on), (p_off, r_off) = seen[True], seen[False]
    if r_off:
        raise CheckFailed("reasoning present with enable_thinking=false")
    if p_on == p_off and r_on == r_off:
        raise CheckFailed(
            f"enable_thinking true/false made no difference ({p_on} prompt tokens, reasoning {r_on} both times)"
        )
    return Passed(f"thinking on: {p_on} prompt tokens, reasoning {r_on}; off: {p_off} prompt tokens, none")


SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "temperature_c": {"type": "integer"},
        "conditions": {"type": "string", "enum": ["sunny", "cloudy", "rain"]},
    },
    "required": ["city", "temperature_c", "conditions"],
    "additionalProperties": False,
}


def structured_chat(ctx: Context) -> Passed:
    r = ctx.client.chat.completions.create(
        model=ctx.model,
        messages=[user("Report the weather in Paris as JSON.")],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "weather", "schema": SCHEMA, "strict": True},
        },
        max_tokens=64,
    )
    require_object(r, "chat.completion", "default call")
    doc = parse_json(r.choices[0].message.content or "", "the output")
    validate(doc, SCHEMA, "the output")
    return Passed(f"valid: {doc}")


def prefix_cache_chat(ctx: Context) -> Passed:
    messages = [user(long_prompt(ctx, "chat"))]
    seen = []
    for _ in range(2):
        r = ctx.client.chat.completions.create(model=ctx.model, messages=messages, max_tokens=1)
        seen.append((r.usage.prompt_tokens, get(r.usage, "prompt_tokens_details", "cached_tokens")))
    return judge_cache(seen, "usage.prompt_tokens_details.cached_tokens")


def judge_cache(seen: list[tuple[int, int | None]], field_name: str) -> Passed:
    (p1, c1), (p2, c2) = seen
    data = {"prompt_tokens": [p1, p2], "cached_tokens": [c1, c2]}
    if c2 is None:
        raise CheckFailed(f"{field_name} is missing on the repeated {p2}-token prompt", data)
    if not 0 < c2 <= p2:
        raise CheckFailed(f"{field_name} = {c2} on the repeated {p2}-token prompt", data)
    return Passed(f"repeat of a {p2}-token prompt: {c2} cached (first call {c1})", data)


def stream_token_ids(ctx: Context) -> Passed:
    # Token ids stream on /v1/completions (an engine may reject them with streaming chat by design).
    timed = drain(
        ctx,
        lambda **kw: ctx.client.completions.create(
            model=ctx.model,
            prompt="The capital of France is",
            max_tokens=ctx.max_tokens,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"return_token_ids": True},
            **kw,
        ),
        lambda chunk: any(ch.text for ch in chunk.choices or []),
    )
    ids: list[int] = []
    usage = None
    for chunk in timed.events:
        usage = chunk.usage or usage
        for ch in chunk.choices:
            ids.extend(extra(ch, "token_ids") or [])
    if not ids:
        raise CheckFailed("the stream carried no token_ids")
    if usage is None:
        raise CheckFailed(f"{len(ids)} token ids but no usage to check them against (include_usage)")
    if usage.completion_tokens != len(ids):
        raise CheckFailed(f"{len(ids)} token ids streamed but usage says {usage.completion_tokens}")
    if not all(isinstance(i, int) and i >= 0 for i in ids):
        raise CheckFailed(f"token_ids are not non-negative integers: {ids[:5]}")
    return Passed(f"{len(ids)} token ids streamed, equal to usage")
