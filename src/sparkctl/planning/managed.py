"""What sparkctl sets itself and the profile may not set again: the engine's managed flags in
engine/mode args (`planning.build` calls these before it renders a rank), and the container env
sparkctl renders (HF_HUB_OFFLINE, HOME, the caches...) in engine/mode env."""

from __future__ import annotations

import bisect

from sparkctl.engines import get_engine
from sparkctl.engines.capabilities import check_options
from sparkctl.errors import ProfileError
from sparkctl.profile.schema import Mode, Profile

# NCCL/GLOO tuning the user may know better than the defaults: overriding them is allowed.
TUNABLE_PREFIXES = ("NCCL_", "GLOO_")


def check_managed(profile: Profile, mode_name: str) -> None:
    """Flags the engine renders from the profile itself may not be set in engine.args/mode args,
    also not abbreviated: argparse (allow_abbrev) reads `--trust-remote` as `--trust-remote-code`,
    so a key is resolved against the engine's own flag list first. A key the engine does not take
    (an engine without an admin key) may not be set either."""
    engine = get_engine(profile.engine.kind)
    check_capabilities(profile, mode_name)
    managed, known = engine.managed_flags, engine.cli_flags
    known_sorted, managed_sorted = (
        sorted(known),
        sorted(managed),
    )  # prefix lookups by bisection: linear in args
    for where, args in (
        ("engine.args", profile.engine.args),
        (f"modes.{mode_name}.args", profile.modes[mode_name].args),
    ):
        for flag in args:
            target = flag if flag in managed else _argparse_target(flag, known, known_sorted)
            if target in managed:
                read_as = "" if target == flag else f" (the engine reads it as --{target})"
                raise ProfileError(
                    f"{where}.{flag}: '{flag}'{read_as} is set by sparkctl from {managed[target]}; set it there",
                    fix=f"remove '{flag}' from {where} and set {managed[target]}",
                )
            if flag not in known and _prefixed(managed_sorted, flag, 1):
                raise ProfileError(
                    f"{where}.{flag}: '{flag}' abbreviates a flag sparkctl sets",
                    fix=f"write the engine's full flag name in {where}",
                )


def check_capabilities(profile: Profile, mode_name: str) -> None:
    """What the profile asks of the engine that it lacks: a key (no auth, no admin key), a replica
    over several nodes (no multi-node), options it does not define."""
    engine = get_engine(profile.engine.kind)
    keys = engine.auth.keys if engine.auth else ()
    if profile.engine.api_key is not None and "api-key" not in keys:
        raise ProfileError(
            f"engine.api_key: engine '{engine.name}' checks no API key",
            fix="remove engine.api_key and keep engine.host on loopback (or expose: public)",
        )
    if profile.engine.admin_api_key is not None and "admin-api-key" not in keys:
        raise ProfileError(
            f"engine.admin_api_key: engine '{engine.name}' has no admin key",
            fix="remove engine.admin_api_key (engine.api_key guards every route)",
        )
    mode = profile.modes[mode_name]
    if engine.multi_node is None and mode.nodes_per_replica > 1:
        raise ProfileError(
            f"modes.{mode_name}: engine '{engine.name}' serves a replica on one node only "
            f"({mode.nodes_per_replica} nodes a replica here)",
            fix=f"one replica per node: modes.{mode_name}.replicas: {len(mode.nodes)}",
        )
    check_options(engine.options, profile.engine.options, engine.name)


def _prefixed(ordered: list[str], flag: str, most: int) -> list[str]:
    """Up to `most` names of the sorted list that start with `flag` (bisection, not a scan)."""
    out, i = [], bisect.bisect_left(ordered, flag)
    while i < len(ordered) and len(out) < most and ordered[i].startswith(flag):
        out.append(ordered[i])
        i += 1
    return out


def _argparse_target(flag: str, known: frozenset[str], ordered: list[str]) -> str:
    """The flag argparse reads `--flag` as: itself, or the one known flag it is a prefix of."""
    if not known or flag in known:
        return flag
    hits = _prefixed(ordered, flag, 2)
    return hits[0] if len(hits) == 1 else flag


def check_env_overrides(profile: Profile, mode: Mode, rendered: dict[str, object]) -> None:
    """engine.env / modes.<mode>.env may not replace what sparkctl renders: `HF_HUB_OFFLINE: "0"`
    would void `engine.offline: true`, HOME/HF_HOME/TRITON_CACHE_DIR would move the mounts."""
    mode_name = next(name for name, m in profile.modes.items() if m is mode)
    for where, env in (("engine.env", profile.engine.env), (f"modes.{mode_name}.env", mode.env)):
        for key in env:
            if key in rendered and not key.startswith(TUNABLE_PREFIXES):
                source = "engine.offline" if key == "HF_HUB_OFFLINE" else "the profile"
                raise ProfileError(
                    f"{where}.{key}: sparkctl sets {key} itself (from {source}); {where} may not replace it",
                    fix=f"remove {key} from {where}"
                    + (
                        " and set engine.offline: false to let the engine fetch"
                        if key == "HF_HUB_OFFLINE"
                        else ""
                    ),
                )
