"""A fleet's plan as data: every service's Plan in its mode, its memory budget on each node, and
the sum per node against what the node can give. Pure: `plan`, `profile check` and (later)
lifecycle, status and export read this one object (docs/fleet.md).

A service's budget on a node is its `memory_gib` (one figure, or per node), else what its
engine's memory flag turns into: fraction x the node's memory (nodes[].gpu.memory_gib), per rank
on unified memory, per GPU on discrete ones; on unified memory a private IPC namespace's
shm_size is the same RAM and counts too, as admission counts it. A node's capacity: unified,
memory_gib - memory.reserve_gib (the host's reserve, the figure admission keeps), less a reserve
for each router there; discrete, each GPU's memory_gib. A fleet over it is refused with the
per-node sums and flags that fit, computed and re-checked on the edited profile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from sparkctl.engines import get_engine
from sparkctl.errors import ProfileError, UsageError, several
from sparkctl.planning.build import build_plan
from sparkctl.planning.model import Plan, PlanFacts
from sparkctl.profile.fleet import SINGLE, service_names, service_profile
from sparkctl.profile.memory import unified_nodes
from sparkctl.profile.schema import Profile
from sparkctl.units import parse_size

GIB = 1 << 30
ROUTER_GIB = 1.0  # a router's (the gateway's) reserve on a unified-memory node
SLACK_GIB = 0.05  # a declared budget the flag overshoots by less than this still counts as kept


class FleetError(ProfileError):
    """A fleet whose budgets do not fit a node (exit 2, like a layout that cannot run)."""


@dataclass(frozen=True)
class Share:
    """One service's planned memory on one node."""

    service: str
    node: str
    gib: float  # what the sum counts: the budget, plus shm on unified memory
    ranks: int
    basis: str  # where the figure comes from, in words
    flag_gib: float | None = None  # what the engine's memory flag takes (None: memory unknown)
    declared_gib: float | None = None  # memory_gib for this node, when given
    per_gpu: dict[int, float] = field(default_factory=dict)  # discrete GPUs: GPU id -> GiB

    def to_json(self) -> dict:
        return {
            "service": self.service,
            "gib": round(self.gib, 2),
            "ranks": self.ranks,
            "basis": self.basis,
            "per_gpu": {str(k): round(v, 2) for k, v in self.per_gpu.items()},
        }


@dataclass(frozen=True)
class NodeBudget:
    node: str
    unified: bool
    capacity_gib: float | None  # None: no nodes[].gpu, nothing to judge against
    basis: str
    shares: list[Share]
    gpu_gib: float | None = None  # discrete: each GPU's memory

    @property
    def used_gib(self) -> float:
        return sum(s.gib for s in self.shares)

    def gpu_sums(self) -> dict[int, float]:
        out: dict[int, float] = {}
        for s in self.shares:
            for gpu, gib in s.per_gpu.items():
                out[gpu] = out.get(gpu, 0.0) + gib
        return out

    @property
    def fits(self) -> bool:
        if self.capacity_gib is None:
            return True
        if not self.unified and self.gpu_gib is not None:
            return all(v <= self.gpu_gib + 1e-9 for v in self.gpu_sums().values())
        return self.used_gib <= self.capacity_gib + 1e-9

    def sum_line(self) -> str:
        terms = " + ".join(f"{s.service} {s.gib:.1f}" for s in self.shares)
        if self.capacity_gib is None:
            return f"{terms} = {self.used_gib:.1f} GiB (capacity unknown: {self.basis})"
        if not self.unified and self.gpu_gib is not None:
            gpus = ", ".join(f"GPU {g}: {v:.1f}" for g, v in sorted(self.gpu_sums().items()))
            return f"{terms} = {self.used_gib:.1f} GiB ({gpus} of {self.gpu_gib:g} GiB each)"
        return f"{terms} = {self.used_gib:.1f} of {self.capacity_gib:.1f} GiB ({self.basis})"

    def to_json(self) -> dict:
        return {
            "node": self.node,
            "unified": self.unified,
            "used_gib": round(self.used_gib, 2),
            "capacity_gib": None if self.capacity_gib is None else round(self.capacity_gib, 2),
            "basis": self.basis,
            "fits": self.fits,
            "gpus": {str(k): round(v, 2) for k, v in self.gpu_sums().items()},
            "services": [s.to_json() for s in self.shares],
        }


@dataclass(frozen=True)
class ServicePlan:
    name: str
    mode: str
    plan: Plan
    shares: list[Share]


@dataclass(frozen=True)
class FleetPlan:
    cluster: str
    is_fleet: bool  # False: a single-model profile (a fleet of one, never judged here)
    services: list[ServicePlan]
    nodes: list[NodeBudget]

    def service(self, name: str) -> ServicePlan:
        return next(s for s in self.services if s.name == name)

    @property
    def over(self) -> list[NodeBudget]:
        return [n for n in self.nodes if not n.fits]

    def to_json(self) -> dict:
        return {
            "cluster": self.cluster,
            "fleet": self.is_fleet,
            "services": [
                {
                    "name": s.name,
                    "mode": s.mode,
                    "shape": s.plan.shape,
                    "endpoint": s.plan.endpoint.api_base,
                    "served_model_name": s.plan.endpoint.served_model_name,
                    "budget_gib": {sh.node: round(sh.gib, 2) for sh in s.shares},
                    "plan": s.plan.to_json(),
                }
                for s in self.services
            ],
            "nodes": [n.to_json() for n in self.nodes],
        }


def parse_selection(profile: Profile, text: str | None) -> dict[str, str]:
    """`SERVICE:MODE[,SERVICE:MODE]` (a single-model profile: `MODE`) -> every service's mode,
    the ones not named in their default mode."""
    names = service_names(profile)
    chosen = {name: service_profile(profile, name).default_mode() for name in names}
    if not text:
        return chosen
    if not profile.models:
        return {SINGLE: text}
    for item in text.split(","):
        name, sep, mode = item.strip().partition(":")
        if name not in chosen:
            raise UsageError(
                f"unknown service '{name}' in '{text}'",
                fix=f"name SERVICE:MODE with a service of this fleet: {', '.join(names)}",
            )
        modes = list(profile.models[name].modes)
        if sep and mode not in modes:
            raise UsageError(
                f"unknown mode '{mode}' of service '{name}'", fix=f"its modes: {', '.join(modes)}"
            )
        chosen[name] = mode if sep else chosen[name]
    return chosen


def service_plan(profile: Profile, name: str, mode: str, facts: PlanFacts | None = None) -> ServicePlan:
    """One service's plan in `mode`, as the commands run it (its view: planning/fleet_view.py),
    and its shares."""
    from sparkctl.planning.fleet_view import service_view

    view = service_view(profile, name)
    plan = build_plan(view, mode, facts)
    return ServicePlan(name, mode, plan, _shares(profile, view, name, mode, plan))


def _shares(profile: Profile, view: Profile, name: str, mode: str, plan: Plan) -> list[Share]:
    from sparkctl.profile.topology import mode_layout

    memory = get_engine(view.engine.kind).memory
    slots = mode_layout(view, view.modes[mode]).slots  # the ranks' order
    declared = profile.models[name].memory_gib if profile.models else None
    out = []
    for node in dict.fromkeys(plan.nodes):
        gpu = view.node(node).gpu
        unified = bool(unified_nodes(view, [node]))
        mine = [(spec, slot) for spec, slot in zip(plan.ranks, slots, strict=True) if spec.node == node]
        flag_gib, per_gpu, words = None, {}, []
        if gpu is not None and memory is not None:  # no memory model: only memory_gib can say
            flag_gib = 0.0
            for spec, slot in mine:
                f = memory.fraction(spec.argv) or memory.gb10_max
                words.append(f"--{memory.flag} {f:g}")
                take = f * gpu.memory_gib * (1 if unified else len(slot.gpu_ids))
                flag_gib += take
                for g in slot.gpu_ids:
                    per_gpu[g] = per_gpu.get(g, 0.0) + f * gpu.memory_gib
        mine_gib = declared.get(node) if isinstance(declared, dict) else declared
        if mine_gib is not None:
            gib, basis = mine_gib, f"memory_gib {mine_gib:g}"
            if per_gpu:  # a declared budget spread over the GPUs it runs on
                per_gpu = {g: mine_gib / len(per_gpu) for g in per_gpu}
        elif flag_gib is not None:
            assert gpu is not None
            ranks = f"{len(mine)} x " if len(mine) > 1 else ""
            gib, basis = flag_gib, f"{ranks}{words[0]} x {gpu.memory_gib:g} GiB"
        else:
            gib, basis = (
                0.0,
                "no nodes[].gpu: memory unknown" if gpu is None else "no memory model: set memory_gib",
            )
        shm = sum(parse_size(spec.options.shm_size) for spec, _ in mine if spec.options.ipc_mode != "host")
        if unified and shm:
            gib += shm / GIB
            basis += f" + shm {shm / GIB:g} GiB"
        out.append(Share(name, node, gib, len(mine), basis, flag_gib, mine_gib, per_gpu))
    return out


def _node_budgets(profile: Profile, services: list[ServicePlan]) -> list[NodeBudget]:
    by_node: dict[str, list[Share]] = {}
    for s in services:
        for share in s.shares:
            by_node.setdefault(share.node, []).append(share)
        if s.plan.router is not None and unified_nodes(profile, [s.plan.router.node]):
            node = s.plan.router.node
            by_node.setdefault(node, []).append(
                Share(f"{s.name} router", node, ROUTER_GIB, 1, "the router's reserve")
            )
    out = []
    reserve = profile.memory.reserve_gib
    for node in [n.name for n in profile.nodes if n.name in by_node]:
        gpu, unified = profile.node(node).gpu, bool(unified_nodes(profile, [node]))
        if gpu is None:
            out.append(NodeBudget(node, unified, None, "no nodes[].gpu", by_node[node]))
        elif unified:
            basis = f"memory_gib {gpu.memory_gib:g} - memory.reserve_gib {reserve:g}"
            out.append(NodeBudget(node, True, gpu.memory_gib - reserve, basis, by_node[node]))
        else:
            count = profile.node(node).gpus
            basis = f"{count} GPU(s) x {gpu.memory_gib:g} GiB"
            shares = by_node[node]
            out.append(NodeBudget(node, False, count * gpu.memory_gib, basis, shares, gpu.memory_gib))
    return out


def build_fleet(
    profile: Profile, selection: str | dict[str, str] | None = None, facts: PlanFacts | None = None
) -> FleetPlan:
    """Every service's plan in its mode and the memory per node (no judgement: `check_fleet`)."""
    chosen = selection if isinstance(selection, dict) else parse_selection(profile, selection)
    services = [service_plan(profile, name, mode, facts) for name, mode in chosen.items()]
    return FleetPlan(profile.cluster, bool(profile.models), services, _node_budgets(profile, services))


def plan_fleet(
    profile: Profile, selection: str | dict[str, str] | None = None, facts: PlanFacts | None = None
) -> FleetPlan:
    """The fleet's plan, or FleetError when a fleet (models:) does not fit: what `plan` and
    `profile check` run. A single-model profile is never refused here (admission judges it)."""
    fleet = build_fleet(profile, selection, facts)
    if fleet.is_fleet:
        from sparkctl.planning.fleet_fix import refusal

        for names in judged_sets(profile, [s.name for s in fleet.services]):
            services = [s for s in fleet.services if s.name in names]
            errors = refusal(
                profile, FleetPlan(fleet.cluster, True, services, _node_budgets(profile, services))
            )
            if errors:
                raise several(errors)
    return fleet


def judged_sets(profile: Profile, names: list[str]) -> list[list[str]]:
    """The services that must fit together: every pinned one, with each on-demand one in turn (the
    supervisor stops idle on-demand services to make room for another: supervisor/on_demand.py)."""
    pinned = [n for n in names if not profile.models[n].on_demand]
    on_demand = [n for n in names if profile.models[n].on_demand]
    return [[*pinned, n] for n in on_demand] if on_demand else [names]


def budget_problems(fleet: FleetPlan) -> list[tuple[str, str]]:
    """(node, message) of every budget a fleet breaks: a node over its capacity, a service whose
    memory flag takes more than its declared memory_gib."""
    out = []
    for s in fleet.services:
        for sh in s.shares:
            flag, declared = sh.flag_gib, sh.declared_gib
            if declared is not None and flag is not None and flag > declared + SLACK_GIB:
                message = f"models.{s.name}: its memory flag takes {flag:.1f} GiB, above its memory_gib {declared:g}"
                out.append((sh.node, message))
    for n in fleet.over:
        out.append((n.node, f"the services' memory does not fit: {n.sum_line()}"))
    return out


def fraction_step(value: float, scale: float) -> float:
    """A fraction scaled down, rounded down to 2 decimals."""
    return math.floor(value * scale * 100) / 100
