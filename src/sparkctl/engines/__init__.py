"""Serving engines behind one interface (base.Engine): SGLang (the default) and vLLM.

`get_engine(name)` imports an implementation only when asked (the CLI path stays light). Adding
an engine (vLLM) is one package here that provides an `Engine`, plus a line in `_ENGINES` and
its tests; plan, profile validation, preflight and readiness ask the engine.
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import TYPE_CHECKING

from sparkctl.profile.base import DEFAULT_ENGINE, ENGINE_KINDS

if TYPE_CHECKING:
    from sparkctl.engines.base import Engine

# engine name (profile engine.kind) -> "module:attribute" of its Engine instance
_ENGINES: dict[str, str] = {
    "sglang": "sparkctl.engines.sglang:ENGINE",
    "vllm": "sparkctl.engines.vllm:ENGINE",
}
ENGINE_NAMES: tuple[str, ...] = tuple(_ENGINES)  # == profile.base.ENGINE_KINDS (a unit test holds it)
__all__ = ["DEFAULT_ENGINE", "ENGINE_KINDS", "ENGINE_NAMES", "get_engine"]


@cache
def get_engine(name: str = DEFAULT_ENGINE) -> Engine:
    from sparkctl.errors import UsageError

    if name not in _ENGINES:
        raise UsageError(f"unknown engine '{name}'", fix=f"engine.kind is one of: {', '.join(_ENGINES)}")
    module, _, attr = _ENGINES[name].partition(":")
    return getattr(importlib.import_module(module), attr)
