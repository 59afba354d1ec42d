"""Definitions every profile module shares: the strict model base, a port, the engine kinds.

The engine kinds are a pure name list: the profile validates `engine.kind` against it without
importing any engine (engines/__init__.py maps each name to its implementation; a unit test
keeps the two lists equal). Flags an engine manages are checked when the plan is built.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

ENGINE_KINDS: tuple[str, ...] = ("sglang", "vllm", "llamacpp")
DEFAULT_ENGINE = "sglang"


def _not_a_bool(value: object) -> object:
    """pydantic reads `port: true` (and YAML 1.1's yes/on) as 1: a slip, never a number."""
    if isinstance(value, bool):
        raise ValueError("a yes/no value (YAML reads true, yes, on and their opposites so), not a number")
    return value


Count = Annotated[int, BeforeValidator(_not_a_bool)]  # an int that is not a bool in disguise
Port = Annotated[int, BeforeValidator(_not_a_bool), Field(ge=1, le=65535)]
NAME_RE = r"^[a-z0-9][a-z0-9_.-]*$"  # node, mode, service and cluster names
Name = Annotated[str, Field(pattern=NAME_RE, max_length=40)]
# engine.gateway / engine.internal_port (planning/gateway.py, docs/security.md)
GATEWAY_HELP = (
    "A gateway (HAProxy, its own container) on the API port, the engine behind it on 127.0.0.1: it "
    "checks the key and passes only the OpenAI routes, /health and /metrics. false: the engine "
    "serves the port itself. (`front:` is the old name of this key.)"
)
INTERNAL_PORT_HELP = (
    "The engine's own port behind the gateway, for engine.port (replicas shift by the same amount; "
    "default: the API port - 10000, or + 10000 below 11024)."
)


class Strict(BaseModel):
    # defer_build: a model's validator is built when it first validates, not at import: a profile's
    # validation builds what it uses in one go, and the models it does not use (a fleet's, other
    # engines' options) are never built (~5 ms of CPU of a re-ship; docs/shipping.md).
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
