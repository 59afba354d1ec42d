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
# engine.front / engine.internal_port (node/front.py, docs/security.md)
FRONT_HELP = (
    "A filtering front on the API port (the engine behind it on 127.0.0.1): refuses the routes that "
    "reveal keys (SGLang's /server_info). false: the engine serves the port itself."
)
INTERNAL_PORT_HELP = (
    "The engine's own port behind the front, for engine.port (replicas shift by the same amount; "
    "default: the API port - 10000, or + 10000 below 11024)."
)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
