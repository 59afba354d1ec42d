"""Responses API checks. Every call but ResponsesStream uses the SDK's default (no `stream`
argument): that is what client code does, and a server that streams anyway breaks it."""

from __future__ import annotations

from typing import Any

from sparkctl.verify.base import (
    SDK_DEFAULT_FIX,
    CheckFailed,
    Context,
    Passed,
    drain,
    get,
    long_prompt,
    not_object,
    output_types,
    parse_json,
    require_object,
    responses_usage,
    user,
    validate,
)
from sparkctl.verify.chat_checks import SCHEMA, judge_cache


def create(ctx: Context, where: str, **kw: Any) -> Any:
    """One Responses call with the SDK's defaults that must come back completed. When the default
    call is broken, the check goes on with stream=False (so it still judges its own feature) and
    the runner fails it anyway: client code uses the default."""
    r = ctx.client.responses.create(model=ctx.model, **kw)
    if why := not_object(r, "response"):
        ctx.default_broken = why
        r = require_object(
            ctx.client.responses.create(model=ctx.model, stream=False, **kw), "response", where
        )
    if r.status not in ("completed", "incomplete"):
        raise CheckFailed(f"{where}: status={r.status} error={r.error}")
    return r


def responses_default(ctx: Context) -> Passed:
    r = ctx.client.responses.create(
        model=ctx.model, input="Name one prime number.", max_output_tokens=ctx.max_tokens
    )
    if why := not_object(r, "response"):
        raise CheckFailed(why, fix=SDK_DEFAULT_FIX)
    inp, out = responses_usage(r, "default call")
    if not r.output_text:
        raise CheckFailed(f"no output text (items {output_types(r)})")
    return Passed(f"{inp} input / {out} output tokens, status {r.status}")


def _one_responses_stream(ctx: Context) -> tuple[int, Any, list[str]]:
    """One streamed Responses call: its text deltas, its completed response, the event types seen."""
    timed = drain(
        ctx,
        lambda **kw: ctx.client.responses.create(
            model=ctx.model,
            input="Name one prime number.",
            max_output_tokens=ctx.max_tokens,
            stream=True,
            **kw,
        ),
        lambda event: getattr(event, "type", None) == "response.output_text.delta",
    )
    deltas, completed, kinds = 0, None, []
    for event in timed.events:
        kind = getattr(event, "type", None)
        if kind not in kinds:
            kinds.append(kind)
        if kind == "response.output_text.delta" and event.delta:
            deltas += 1
        elif kind in ("response.completed", "response.incomplete"):
            completed = event.response
        elif kind in ("response.failed", "error"):
            raise CheckFailed(f"{kind}: {get(event, 'response', 'error') or event}")
    return deltas, completed, kinds


def responses_stream(ctx: Context) -> Passed:
    """Text deltas and a response.completed. A model that stopped before its first text token
    (a sampled end of turn: the server did nothing wrong) is asked once more."""
    for attempt in (1, 2):
        deltas, completed, kinds = _one_responses_stream(ctx)
        out = get(completed, "usage", "output_tokens") if completed is not None else None
        if deltas or out != 0 or attempt == 2:
            break
    if not deltas:
        said = (
            f"{out} output tokens in response.completed" if completed is not None else "no response.completed"
        )
        raise CheckFailed(
            f"no response.output_text.delta events ({said}; events {', '.join(map(str, kinds))})"
        )
    if completed is None:
        raise CheckFailed(f"{deltas} text deltas but no response.completed event")
    _, out = responses_usage(completed, "response.completed")
    return Passed(f"{deltas} text deltas, {out} output tokens in response.completed")


def max_output_tokens(ctx: Context) -> Passed:
    limit = 5
    r = create(
        ctx,
        "reply",
        instructions="You answer in one word.",
        input="Write a long story about a lighthouse.",
        temperature=0.6,
        top_p=0.9,
        max_output_tokens=limit,
    )
    _, out = responses_usage(r, "reply")
    if not 0 < out <= limit:
        raise CheckFailed(f"max_output_tokens={limit} not honoured: {out} output tokens")
    return Passed(f"{out} tokens <= max_output_tokens {limit} (with instructions, temperature, top_p)")


def effort_bogus(ctx: Context) -> Passed:
    import openai

    try:
        r = ctx.client.responses.create(
            model=ctx.model, input="Name one prime.", reasoning={"effort": "bogus"}, max_output_tokens=4
        )
    except openai.BadRequestError as exc:  # 400: what the API answers an unknown enum value
        return Passed(f"rejected with HTTP {exc.status_code}")
    except openai.UnprocessableEntityError as exc:
        return Passed(f"rejected with HTTP {exc.status_code}")
    status = get(r, "status") if not isinstance(r, str) else "a stream"
    raise CheckFailed(f"reasoning.effort='bogus' accepted ({status}): effort values are not validated")


def _reasoning(r: Any) -> tuple[int, int]:
    """(reasoning output items, reasoning tokens) of one response."""
    items = sum(1 for t in output_types(r) if t == "reasoning")
    return items, get(r, "usage", "output_tokens_details", "reasoning_tokens") or 0


def effort_effect(ctx: Context) -> Passed:
    """`none`/`low`/`high` must differ observably: reasoning present or absent, or token counts."""
    seen = {}
    for effort in ("none", "low", "high"):
        r = create(
            ctx,
            f"effort {effort}",
            input="Is 91 a prime number?",
            reasoning={"effort": effort},
            max_output_tokens=64,
        )
        seen[effort] = _reasoning(r)
    data = {"reasoning": {k: {"items": v[0], "tokens": v[1]} for k, v in seen.items()}}
    if seen["none"][0] or seen["none"][1]:
        raise CheckFailed(f"effort 'none' still reasons ({seen['none'][1]} reasoning tokens)", data)
    if seen["low"] == seen["none"] and seen["high"] == seen["none"]:
        raise CheckFailed(
            "reasoning.effort none/low/high made no difference (no reasoning at any tier)", data
        )
    return Passed(
        f"reasoning tokens none {seen['none'][1]}, low {seen['low'][1]}, high {seen['high'][1]}", data
    )


def multi_turn_typed_history(ctx: Context) -> Passed:
    first = [user("Pick a colour.")]
    r1 = create(ctx, "turn 1", input=first, max_output_tokens=ctx.max_tokens)
    if not r1.output:
        raise CheckFailed("turn 1 returned no output items")
    in1, out1 = responses_usage(r1, "turn 1")
    # The SDK's own pydantic output items go back verbatim: what agents and the SDK examples do.
    r2 = create(ctx, "turn 2", input=[*first, *r1.output, user("Now pick another one.")], max_output_tokens=4)
    in2, _ = responses_usage(r2, "turn 2")
    if in2 <= in1 + max(out1 - 2, 0):  # the history (turn 1 in and out) must reach the model
        raise CheckFailed(
            f"turn 2 has {in2} input tokens: the {in1}+{out1}-token history did not reach the model"
        )
    return Passed(f"turn 2 read the history of {output_types(r1)}: {in2} input tokens")


def structured_responses(ctx: Context) -> Passed:
    r = create(
        ctx,
        "reply",
        input="Report the weather in Paris as JSON.",
        text={"format": {"type": "json_schema", "name": "weather", "schema": SCHEMA, "strict": True}},
        max_output_tokens=64,
    )
    doc = parse_json(r.output_text or "", "the output")
    validate(doc, SCHEMA, "the output")
    return Passed(f"valid: {doc}")


def prefix_cache_responses(ctx: Context) -> Passed:
    prompt = long_prompt(ctx, "responses")
    seen = []
    for _ in range(2):
        r = create(ctx, "reply", input=prompt, max_output_tokens=1)
        inp, _ = responses_usage(r, "reply")
        seen.append((inp, get(r.usage, "input_tokens_details", "cached_tokens")))
    return judge_cache(seen, "usage.input_tokens_details.cached_tokens")
