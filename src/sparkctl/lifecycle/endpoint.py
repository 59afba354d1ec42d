"""Which endpoint a command talks to: --url/--model as given, or the profile's plan for MODE
(default: the mode running now, else the profile's default mode). Shared by verify and bench."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from sparkctl.errors import UsageError

if TYPE_CHECKING:
    from sparkctl.profile.schema import Profile


def resolve_endpoint(
    load_profile: Callable[[], Profile], mode: str | None, url: str | None, model: str | None
) -> tuple[str, str, str | None, str | None]:
    """(url, model, config_hash, mode); the profile is loaded only when --url is not given."""
    if url or model:
        if not (url and model):
            raise UsageError("--url and --model go together", fix="pass both, or neither and use -p PROFILE")
        if mode:
            raise UsageError("MODE and --url are exclusive", fix="drop MODE, or drop --url/--model")
        return url, model, None, None
    from sparkctl.plan import build_plan

    prof = load_profile()
    if mode is None:
        from sparkctl.connectors import NodePool
        from sparkctl.lifecycle.status import running_mode

        with NodePool(prof) as pool:
            mode = running_mode(prof, pool)  # what runs now; else the profile's default mode
    plan = build_plan(prof, mode)
    return plan.endpoint.url, plan.endpoint.served_model_name, plan.settled_hash, plan.mode
