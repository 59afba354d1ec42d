"""Definitions every profile module shares: the strict model base, a port, the engine kinds.

The engine kinds are a pure name list: the profile validates `engine.kind` against it without
importing any engine (engines/__init__.py maps each name to its implementation; a unit test
keeps the two lists equal). Flags an engine manages are checked when the plan is built.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

ENGINE_KINDS: tuple[str, ...] = ("sglang", "vllm")
DEFAULT_ENGINE = "sglang"

Port = Annotated[int, Field(ge=1, le=65535)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
