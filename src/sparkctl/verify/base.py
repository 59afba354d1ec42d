"""What every endpoint check shares: the context, the verdict types and small reply helpers.

A check calls the server through the official `openai` SDK the way a user's program does (SDK
defaults first, explicit variants after), returns `Passed` or raises `CheckFailed` with what was
seen. Whether a failure is a `fail` or a `warn` is the check's `level`, not the check's choice.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from sparkctl.clients.stream import Limits, Timed

# Enough for an answer, small enough that a slow server finishes every check quickly.
MAX_TOKENS = 16

# contract: the OpenAI API says so, a failure is `fail`. optional: a vendor extension or an
# optional feature (token ids, cache reports, thinking switches), a failure is `warn`.
Level = Literal["contract", "optional"]


class CheckFailed(Exception):
    """The server answered, but not as the check requires."""

    def __init__(self, message: str, data: dict | None = None, fix: str | None = None) -> None:
        super().__init__(message)
        self.data = data or {}
        self.fix = fix  # overrides the check's usual cause when the cause is known


def _limits() -> Limits:
    from sparkctl.clients.stream import Limits

    return Limits()


@dataclass
class Context:
    client: Any  # openai.OpenAI
    model: str
    limits: Limits = field(default_factory=_limits)  # first token, stall, whole request
    max_tokens: int = MAX_TOKENS
    long_prompt_words: int = 1500  # ~2k tokens: many 64-token cache pages
    nonce: str = field(default_factory=lambda: uuid.uuid4().hex[:12])  # fresh prefix per run
    default_broken: str | None = None  # set when the SDK's default call failed in this check


@dataclass
class Passed:
    summary: str
    data: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Check:
    name: str  # stable, e.g. "ChatStream" or "ToolChoiceNone"
    level: Level
    proves: str
    usual_cause: str  # what a failure usually means: becomes the finding's fix
    run: Callable[[Context], Passed]


def get(obj: Any, *path: str) -> Any:
    """Walk attributes/keys, None when missing: servers differ in which usage fields they send."""
    for name in path:
        if obj is None:
            return None
        obj = obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)
    return obj


def extra(obj: Any, name: str) -> Any:
    """A non-OpenAI field (e.g. `reasoning_content`) the SDK keeps in `model_extra`."""
    ext = getattr(obj, "model_extra", None) or {}
    return ext[name] if name in ext else getattr(obj, name, None)


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def drain(ctx: Context, open_stream: Callable[..., Any], is_token: Callable[[Any], bool]) -> Timed:
    """Every event of a stream, timed, under the context's limits (sparkctl.clients.stream).
    `open_stream(timeout=...)` makes the SDK call with stream=True."""
    from sparkctl.clients.stream import watch

    return watch(lambda socket_s: open_stream(timeout=socket_s), ctx.limits, is_token)


SDK_DEFAULT_FIX = "the server streams when `stream` is absent; the OpenAI API (and the SDK) expect one object"


def not_object(reply: Any, kind: str) -> str | None:
    """Why `reply` is not the one JSON object the SDK's non-streaming call must get back (a server
    that streams anyway leaves the SDK holding the raw text), or None."""
    if isinstance(reply, str | bytes):
        text = reply.decode(errors="replace") if isinstance(reply, bytes) else reply
        what = "an SSE stream" if text.lstrip().startswith(("data:", "event:")) else "text"
        return f"the SDK's default call got {what} back, not a {kind} object"
    if getattr(reply, "object", None) not in (kind, None):
        return f"the SDK's default call got {type(reply).__name__} back, not a {kind} object"
    return None


def require_object(reply: Any, kind: str, where: str) -> Any:
    if why := not_object(reply, kind):
        raise CheckFailed(f"{where}: {why}", fix=SDK_DEFAULT_FIX)
    return reply


def responses_usage(resp: Any, where: str) -> tuple[int, int]:
    usage = get(resp, "usage")
    if usage is None:
        raise CheckFailed(f"{where}: response has no usage")
    inp, out = get(usage, "input_tokens"), get(usage, "output_tokens")
    if inp is None or out is None:
        raise CheckFailed(f"{where}: usage is not in Responses shape (no input_tokens/output_tokens)")
    return inp, out


def output_types(resp: Any) -> list[str]:
    return [item.type for item in get(resp, "output") or []]


def long_prompt(ctx: Context, api: str) -> str:
    from sparkctl.clients.prompts import filler

    return filler(ctx.long_prompt_words, seed=f"[{api} {ctx.nonce}] Reply with the first word of this list.")


def validate(instance: Any, schema: dict, what: str) -> None:
    """Validate with a real JSON Schema validator; the first error, located, on failure."""
    import jsonschema

    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(instance), key=lambda e: e.path)
    if errors:
        where = "/".join(str(p) for p in errors[0].absolute_path) or "(document)"
        raise CheckFailed(f"{what} violates its schema at {where}: {errors[0].message}")


def parse_json(text: str, what: str) -> Any:
    import json

    try:
        return json.loads(text)
    except ValueError:
        raise CheckFailed(f"{what} is not JSON: {text[:80]!r}") from None
