"""Definitions every profile module shares: the strict model base, a port, the engine kinds.

The engine kinds are a pure name list: the profile validates `engine.kind` against it without
importing any engine (engines/__init__.py maps each name to its implementation; a unit test
keeps the two lists equal). Flags an engine manages are checked when the plan is built.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

ENGINE_KINDS: tuple[str, ...] = ("sglang", "vllm", "llamacpp")
DEFAULT_ENGINE = "sglang"

Port = Annotated[int, Field(ge=1, le=65535)]
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
