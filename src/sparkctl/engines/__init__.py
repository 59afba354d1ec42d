"""Serving engines behind one interface (base.Engine: a core plus capabilities): SGLang (the
default), vLLM and llama.cpp's llama-server.

`get_engine(name)` imports an implementation only when asked (the CLI path stays light). Adding
an engine is one package here that provides an `Engine`, plus a line in `_ENGINES` and its
tests; plan, profile validation, preflight and readiness ask the engine.
"""

from __future__ import annotations

import importlib
import importlib.util
from functools import cache
from typing import TYPE_CHECKING

from sparkctl.profile.base import DEFAULT_ENGINE, ENGINE_KINDS

if TYPE_CHECKING:
    from types import ModuleType

    from sparkctl.engines.base import Engine
    from sparkctl.engines.capabilities import LaunchSafety

# engine name (profile engine.kind) -> "module:attribute" of its Engine instance
_ENGINES: dict[str, str] = {
    "sglang": "sparkctl.engines.sglang:ENGINE",
    "vllm": "sparkctl.engines.vllm:ENGINE",
    "llamacpp": "sparkctl.engines.llamacpp:ENGINE",
}
ENGINE_NAMES: tuple[str, ...] = tuple(_ENGINES)  # == profile.base.ENGINE_KINDS (a unit test holds it)
__all__ = ["DEFAULT_ENGINE", "ENGINE_KINDS", "ENGINE_NAMES", "command_reader", "get_engine", "launch_safety"]


@cache
def get_engine(name: str = DEFAULT_ENGINE) -> Engine:
    from sparkctl.errors import UsageError

    if name not in _ENGINES:
        raise UsageError(f"unknown engine '{name}'", fix=f"engine.kind is one of: {', '.join(_ENGINES)}")
    module, _, attr = _ENGINES[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def command_reader(name: str) -> ModuleType | None:
    """The engine's launch-line reader (`init --from-command`), engines/<kind>/from_command.py
    (None: the engine has none, and `init --from-command` does not take its lines):
    `launcher_words(words) -> int | None` (is the line its own, and how many words its launcher
    takes) and `read([(flag, values)]) -> (fragment, findings)`. The fragment: kind, model and draft
    ({id, revision} or None), engine (served_model_name, host, port, trust_remote_code), api_keys
    (the key flags given, never their values), layout (tp, pp, nnodes, node_rank, dist_init_addr,
    dist_init_port) and args (the other flags, without dashes)."""
    module = _ENGINES[name].partition(":")[0] + ".from_command"
    if importlib.util.find_spec(module) is None:
        return None
    return importlib.import_module(module)


def launch_safety(name: str, command: str) -> LaunchSafety:
    """The engine's launch checks, for a command that has nothing to show without them."""
    from sparkctl.errors import UsageError

    launch = get_engine(name).launch
    if launch is None:
        raise UsageError(
            f"{command}: engine '{name}' has no launch-safety checks",
            fix="`sparkctl plan` shows the plan; `sparkctl preflight` still checks the nodes and the image",
        )
    return launch
