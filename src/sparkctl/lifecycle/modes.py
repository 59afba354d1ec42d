"""The one answer to "which mode does this command act on": `resolve_mode`, used by up, switch,
down's preview, upgrade, supervise, logs and the endpoint of verify/bench."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from sparkctl.errors import UsageError
from sparkctl.lifecycle.reconcile import choose_mode

if TYPE_CHECKING:
    from sparkctl.connectors.pool import NodePool
    from sparkctl.profile.schema import Profile

Source = Literal["running", "last", "default"]


def resolve_mode(
    profile: Profile,
    mode: str | None = None,
    *,
    tp: int | None = None,
    pool: NodePool | None = None,
    fallback: Sequence[Source] = ("default",),
    missing: tuple[str, str] | None = None,
) -> str:
    """MODE as given (or the mode with `--tp N`); else the first of `fallback` that names a mode
    of this profile: "running" (the one mode whose containers run now, read through `pool`, or a
    pool opened here), "last" (the mode of the last `up` attempt), "default" (the profile's).
    None found: UsageError(`missing` = (message, fix))."""
    if mode is not None or tp is not None:
        return choose_mode(profile, mode, tp)
    for source in fallback:
        found = _from(source, profile, pool)
        if found is not None and found in profile.modes:
            return found
    message, fix = missing or ("no mode to act on", "name the MODE")
    raise UsageError(message, fix=fix)


def _from(source: Source, profile: Profile, pool: NodePool | None) -> str | None:
    if source == "default":
        return profile.default_mode()
    if source == "last":
        from sparkctl.lifecycle.state import last_attempt

        return last_attempt(profile.cluster).get("mode")
    from sparkctl.lifecycle.status import running_mode

    if pool is not None:
        return running_mode(profile, pool)
    from sparkctl.connectors.pool import NodePool

    with NodePool(profile) as own:
        return running_mode(profile, own)
