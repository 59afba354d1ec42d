"""One service of a fleet as the single-model profile every command runs (docs/fleet.md). Pure.

The view is the service's own `image`, `model`, `engine` and `modes` at the top level, with the
ports sparkctl assigned it, under the cluster name `<cluster>-<service>`: so its containers
(`sparkctl-<cluster>-<service>-<mode>-r<rank>`), labels, state file, events log and lock are its
own, and starting, stopping or switching one service never reads or touches another's. The whole
fleet takes one lock more (`fleet_lock_name`) around any start, so two starts never judge the
same node's free memory at once.

A `memory_gib` budget sets the engine's memory flag when neither engine.args nor a mode sets it:
the budget over the node's memory (per GPU on discrete GPUs), rounded down to 2 decimals, taken on
the tightest node the service runs on.
"""

from __future__ import annotations

import math

from sparkctl.engines import get_engine
from sparkctl.profile.fleet import SINGLE, service_names, service_profile
from sparkctl.profile.memory import unified_nodes
from sparkctl.profile.schema import Profile


def service_cluster(cluster: str, service: str) -> str:
    """The cluster name a service's containers, state and lock are keyed by."""
    return f"{cluster}-{service}"


def fleet_lock_name(profile: Profile) -> str:
    """The lock every start of a fleet's service holds (beside its own): the fleet's name."""
    return profile.cluster


def service_view(profile: Profile, name: str) -> Profile:
    """Service `name` of a fleet as a single-model profile under its own cluster name (a single
    profile's one service: the profile itself)."""
    view = service_profile(profile, name)
    if not profile.models:
        return view
    view = view.model_copy(update={"cluster": service_cluster(profile.cluster, name)})
    return _with_budget_flag(profile, name, view)


def _with_budget_flag(profile: Profile, name: str, view: Profile) -> Profile:
    budget = profile.models[name].memory_gib
    memory = get_engine(view.engine.kind).memory
    if budget is None or memory is None or memory.flag in view.engine.args:
        return view
    if any(memory.flag in m.args for m in view.modes.values()):
        return view
    fractions = []
    for mode in view.modes.values():
        for node in dict.fromkeys(mode.nodes):
            gpu = view.node(node).gpu
            gib = budget.get(node) if isinstance(budget, dict) else budget
            if gpu is None or gib is None:
                continue
            per_node = max(1, mode.tp * mode.pp // len(set(mode.nodes)))
            gpus = 1 if unified_nodes(view, [node]) else len(mode.gpu_ids or []) or per_node
            fractions.append(gib / (gpu.memory_gib * gpus))
    if not fractions:
        return view
    fraction = max(0.01, math.floor(min(fractions) * 100) / 100)
    engine = view.engine.model_copy(update={"args": {**view.engine.args, memory.flag: fraction}})
    return view.model_copy(update={"engine": engine})


def service_views(profile: Profile) -> dict[str, Profile]:
    """Every service's view, in the profile's order."""
    return {name: service_view(profile, name) for name in service_names(profile)}


def is_single(name: str) -> bool:
    return name == SINGLE
