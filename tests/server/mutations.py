"""The proxy's mutations, by name. Most break one API feature; the `fake_*`/`fix_*` ones supply a
feature the tiny CPU server lacks (a tool call, valid JSON, reasoning, cached tokens, token ids),
so a test can show a check passes when the feature is there and fails when it is then broken."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

WEATHER = {"city": "Paris", "temperature_c": 18, "conditions": "sunny"}
EFFORT_TOKENS = {"none": 0, "minimal": 0, "low": 8, "medium": 16, "high": 32}


@dataclass(frozen=True)
class Mutation:
    request: Callable[[str, dict], Any] | None = None  # -> new body, or (status, json) to answer
    response: Callable[[str, Any, dict], dict] | None = None  # whole JSON reply
    events: Callable[[str, Any, list], list] | None = None  # whole SSE stream, parsed
    timing: str | None = None  # how the proxy delivers a stream (see proxy.py): buffered, drip, ...


def _is(path: str, api: str) -> bool:
    return path.rstrip("/").endswith("/v1" + api)


def _req(fn: Callable[[dict], dict], api: str) -> Callable[[str, dict], Any]:
    return lambda path, body: fn(copy.deepcopy(body)) if _is(path, api) else body


def _resp(fn: Callable[[Any, dict], dict], api: str) -> Callable[[str, Any, dict], dict]:
    return lambda path, req, data: fn(req, data) if _is(path, api) else data


def _ev(fn: Callable[[Any, list], list], api: str) -> Callable[[str, Any, list], list]:
    return lambda path, req, events: fn(req, events) if _is(path, api) else events


# ----- chat/completions and completions -----


def _chat_empty(req: Any, data: dict) -> dict:
    for ch in data.get("choices", []):
        ch["message"]["content"] = ""
    return data


def _drop_text(req: Any, events: list) -> list:
    for e in events:
        for ch in e.get("choices", []) if isinstance(e, dict) else []:
            for key in ("content", "reasoning_content", "reasoning"):
                ch.get("delta", {}).pop(key, None)
    return events


def _null_finish(req: Any, data: dict) -> dict:
    for ch in data.get("choices", []):
        ch["finish_reason"] = None
    return data


def _drop_usage(req: Any, events: list) -> list:
    out = []
    for e in events:
        if isinstance(e, dict) and e.get("usage"):
            if not e.get("choices"):
                continue  # the usage-only chunk
            e["usage"] = None
        out.append(e)
    return out


def _raise_limits(body: dict) -> dict:
    for key in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        if isinstance(body.get(key), int):
            body[key] *= 4
    return body


def _fix_mct(body: dict) -> dict:
    if "max_completion_tokens" in body:
        body["max_tokens"] = body.pop("max_completion_tokens")
    return body


def _set_chat_content(text: str) -> Callable[[Any, dict], dict]:
    def fn(req: Any, data: dict) -> dict:
        if req and req.get("response_format"):
            for ch in data.get("choices", []):
                ch["message"]["content"] = text
        return data

    return fn


def _strip_kwargs(body: dict) -> dict:
    body.pop("chat_template_kwargs", None)
    return body


def _cache(value: Callable[[int], int]) -> Callable[[Any, dict], dict]:
    def fn(req: Any, data: dict) -> dict:
        usage = data.get("usage") or {}
        if "prompt_tokens" in usage:
            usage["prompt_tokens_details"] = {"cached_tokens": value(usage["prompt_tokens"])}
        if "input_tokens" in usage:
            usage["input_tokens_details"] = {"cached_tokens": value(usage["input_tokens"])}
        return data

    return fn


def _ask_ids(body: dict) -> dict:
    body.pop("return_token_ids", None)  # the upstream rejects it: the proxy adds the ids itself
    return body


def _fake_ids(short: int) -> Callable[[Any, list], list]:
    def fn(req: Any, events: list) -> list:
        usage = next((e["usage"] for e in events if isinstance(e, dict) and e.get("usage")), None)
        texts = [ch for e in events if isinstance(e, dict) for ch in e.get("choices", []) if ch.get("text")]
        n = (usage or {}).get("completion_tokens", len(texts)) - short
        for i, ch in enumerate(texts):
            ch["token_ids"] = [7] * (n - len(texts) + 1 if i == len(texts) - 1 else 1)
        return events

    return fn


# ----- responses -----


def _message_text(data: dict, text: str) -> dict:
    for item in data.get("output", []):
        for part in item.get("content") or []:
            if part.get("type") == "output_text":
                part["text"] = text
    return data


def _nonstream_default(body: dict) -> dict:
    body.setdefault("stream", False)
    return body


def _drop_event(kind: str) -> Callable[[Any, list], list]:
    return lambda req, events: [e for e in events if not (isinstance(e, dict) and e.get("type") == kind)]


def _effort_400(body: dict) -> Any:
    effort = (body.get("reasoning") or {}).get("effort")
    if effort is not None and effort not in (*EFFORT_TOKENS, "xhigh"):
        return 400, {
            "error": {"message": f"invalid reasoning.effort {effort!r}", "type": "invalid_request_error"}
        }
    return body


def _effort_ignored(body: dict) -> dict:
    if body.get("reasoning"):
        body["reasoning"] = {"effort": "medium"}
    return body


def _fake_reasoning(req: Any, data: dict) -> dict:
    effort = ((req or {}).get("reasoning") or {}).get("effort")
    tokens = EFFORT_TOKENS.get(effort, 0)
    if tokens:
        item = {
            "id": "rs_1",
            "type": "reasoning",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": "."}],
        }
        data["output"] = [item, *data.get("output", [])]
    data.setdefault("usage", {})["output_tokens_details"] = {"reasoning_tokens": tokens}
    return data


def _drop_history(body: dict) -> dict:
    if isinstance(body.get("input"), list) and len(body["input"]) > 1:
        body["input"] = body["input"][-1:]
    return body


def _function_call(name: str, args: str) -> dict:
    return {
        "id": "fc_1",
        "type": "function_call",
        "call_id": "call_1",
        "name": name,
        "arguments": args,
        "status": "completed",
    }


def _fake_tools(args: str, honour_name: bool = True) -> Callable[[Any, dict], dict]:
    """A call when tools are offered and tool_choice allows one; after a tool result, an answer
    that repeats the result's `conditions` (what a working model does)."""

    def fn(req: Any, data: dict) -> dict:
        req = req or {}
        outputs = [
            i
            for i in req.get("input") or []
            if isinstance(i, dict) and i.get("type") == "function_call_output"
        ]
        if outputs:
            return _message_text(
                data, f"The weather is {json.loads(outputs[-1]['output']).get('conditions', 'unknown')}."
            )
        choice = req.get("tool_choice", "auto")
        if not req.get("tools") or choice == "none":
            return data
        name = choice["name"] if isinstance(choice, dict) and honour_name else "get_weather"
        data["output"] = [_function_call(name, args)]
        return data

    return fn


def _call_anyway(req: Any, data: dict) -> dict:
    if (req or {}).get("tools"):
        data["output"] = [_function_call("get_weather", json.dumps({"city": "Paris"}))]
    return data


def _lose_tool_result(body: dict) -> dict:
    """The function_call_output reaches the server empty (its content lost on the way)."""
    for item in body.get("input") or []:
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            item["output"] = "{}"
    return body


def _chat_fake_tools(args: str, anyway: bool = False) -> Callable[[Any, dict], dict]:
    """Chat flavour of `_fake_tools`: tool_calls on the message, results as role "tool"."""

    def fn(req: Any, data: dict) -> dict:
        req = req or {}
        results = [m for m in req.get("messages") or [] if m.get("role") == "tool"]
        msg = data["choices"][0]["message"]
        if results:
            msg["content"] = (
                f"The weather is {json.loads(results[-1]['content']).get('conditions', 'unknown')}."
            )
            return data
        if not req.get("tools") or (req.get("tool_choice") == "none" and not anyway):
            return data
        call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": args}}
        msg.update(content=None, tool_calls=[call])
        data["choices"][0]["finish_reason"] = "tool_calls"
        return data

    return fn


def _chat_lose_tool_result(body: dict) -> dict:
    for m in body.get("messages") or []:
        if m.get("role") == "tool":
            m["content"] = "{}"
    return body


C, R, K = "/chat/completions", "/responses", "/completions"
MUTATIONS: dict[str, Mutation] = {
    "chat_empty": Mutation(response=_resp(_chat_empty, C)),
    "null_finish": Mutation(response=_resp(_null_finish, C)),
    "buffered": Mutation(timing="buffered"),
    "drip": Mutation(timing="drip"),
    "duplicated": Mutation(timing="duplicated"),
    "cut": Mutation(timing="cut"),
    "stream_no_text": Mutation(events=_ev(_drop_text, C)),
    "stream_no_usage": Mutation(events=_ev(_drop_usage, C)),
    "raise_limits": Mutation(request=lambda path, body: _raise_limits(copy.deepcopy(body))),
    "fix_max_completion_tokens": Mutation(request=_req(_fix_mct, C)),
    "valid_json": Mutation(response=_resp(_set_chat_content(json.dumps(WEATHER)), C)),
    "invalid_json": Mutation(
        response=_resp(_set_chat_content(json.dumps({"city": "Paris", "temperature_c": 18})), C)
    ),
    "strip_thinking_kwargs": Mutation(request=_req(_strip_kwargs, C)),
    "cache_report": Mutation(response=lambda p, req, d: _cache(lambda n: n - 1)(req, d)),
    "cache_zero": Mutation(response=lambda p, req, d: _cache(lambda n: 0)(req, d)),
    "fake_token_ids": Mutation(request=_req(_ask_ids, K), events=_ev(_fake_ids(0), K)),
    "short_token_ids": Mutation(events=_ev(_fake_ids(1), K)),
    "stream_no_usage_completions": Mutation(events=_ev(_drop_usage, K)),
    "nonstream_default": Mutation(request=_req(_nonstream_default, R)),
    "responses_no_completed": Mutation(events=_ev(_drop_event("response.completed"), R)),
    "responses_no_delta": Mutation(events=_ev(_drop_event("response.output_text.delta"), R)),
    "responses_valid_json": Mutation(response=_resp(lambda q, d: _message_text(d, json.dumps(WEATHER)), R)),
    "responses_invalid_json": Mutation(
        response=_resp(lambda q, d: _message_text(d, json.dumps({**WEATHER, "conditions": "snow"})), R)
    ),
    "effort_400": Mutation(request=_req(_effort_400, R)),
    "effort_ignored": Mutation(request=_req(_effort_ignored, R)),
    "fake_reasoning": Mutation(response=_resp(_fake_reasoning, R)),
    "drop_history": Mutation(request=_req(_drop_history, R)),
    "fake_tools": Mutation(response=_resp(_fake_tools(json.dumps({"city": "Paris"})), R)),
    "bad_tool_args": Mutation(response=_resp(_fake_tools("{}"), R)),
    "wrong_tool": Mutation(response=_resp(_fake_tools(json.dumps({"city": "Paris"}), honour_name=False), R)),
    "call_anyway": Mutation(response=_resp(_call_anyway, R)),
    "lose_tool_result": Mutation(request=_req(_lose_tool_result, R)),
    "chat_fake_tools": Mutation(response=_resp(_chat_fake_tools(json.dumps({"city": "Paris"})), C)),
    "chat_bad_tool_args": Mutation(response=_resp(_chat_fake_tools(json.dumps({"city": ""})), C)),
    "chat_call_anyway": Mutation(
        response=_resp(_chat_fake_tools(json.dumps({"city": "Paris"}), anyway=True), C)
    ),
    "chat_lose_tool_result": Mutation(request=_req(_chat_lose_tool_result, C)),
}
