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
    from types import ModuleType

    from sparkctl.engines.base import Engine

# engine name (profile engine.kind) -> "module:attribute" of its Engine instance
_ENGINES: dict[str, str] = {
    "sglang": "sparkctl.engines.sglang:ENGINE",
    "vllm": "sparkctl.engines.vllm:ENGINE",
}
ENGINE_NAMES: tuple[str, ...] = tuple(_ENGINES)  # == profile.base.ENGINE_KINDS (a unit test holds it)
__all__ = ["DEFAULT_ENGINE", "ENGINE_KINDS", "ENGINE_NAMES", "command_reader", "get_engine"]


@cache
def get_engine(name: str = DEFAULT_ENGINE) -> Engine:
    from sparkctl.errors import UsageError

    if name not in _ENGINES:
        raise UsageError(f"unknown engine '{name}'", fix=f"engine.kind is one of: {', '.join(_ENGINES)}")
    module, _, attr = _ENGINES[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def command_reader(name: str) -> ModuleType:
    """The engine's launch-line reader (`init --from-command`), engines/<kind>/from_command.py:
    `launcher_words(words) -> int | None` (is the line its own, and how many words its launcher
    takes) and `read([(flag, values)]) -> (fragment, findings)`. The fragment: kind, model and draft
    ({id, revision} or None), engine (served_model_name, host, port, trust_remote_code), api_keys
    (the key flags given, never their values), layout (tp, pp, nnodes, node_rank, dist_init_addr,
    dist_init_port) and args (the other flags, without dashes)."""
    return importlib.import_module(_ENGINES[name].partition(":")[0] + ".from_command")
