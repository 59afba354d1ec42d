"""Layouts that work when the node count does not divide the model (three Sparks, 4 KV heads).

TP over every node fails for most models when the node count is not a power of two (attention
and KV heads split evenly or not at all). Instead of only refusing, list what the same boxes can
run: pipeline parallel across the nodes (where the engine's rules allow it), a TP=2 replica plus
solo replicas behind the router, a smaller TP with idle boxes, one solo replica per box. Each is
judged by the same rules and memory planner as the mode itself (a synthetic mode per replica
shape), with the throughput shape it trades for. Pure: the caller passes models, GPU facts and
`build` (planning's build_plan: this floor sits below planning and cannot import it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sparkctl.engines.sglang.launch.check import LaunchContext, context_for, memory_plan, rule_findings
from sparkctl.engines.sglang.launch.inputs import GpuFacts
from sparkctl.findings import Severity

GIB = 1 << 30
SHAPES = {
    "tp": "one replica; single stream fastest (a per-layer all-reduce over the fabric: two Sparks "
    "measured ~1.5x one box), aggregate = that one replica",
    "pp": "one replica, layers split by stage: single stream about one box (stages run in turn, plus a "
    "fabric hop per stage), batched throughput up to {n}x with micro-batches; weights and KV split",
    "mixed": "{r} replicas behind the router: the TP={tp} one ~1.5x a box for one stream, each solo one 1x; "
    "aggregate ~{agg}x one box; unequal replicas (the router's policy sees them as equals)",
    "idle": "one TP={tp} replica (~1.5x one box for one stream); {idle} idle (or free for another model)",
    "dp": "{n} solo replicas behind the router: single stream 1x, aggregate ~{n}x one box; each box holds "
    "the whole model",
}


@dataclass(frozen=True)
class Replica:
    nodes: tuple[str, ...]
    tp: int = 1
    pp: int = 1

    def describe(self) -> str:
        size = f"tp={self.tp}" + (f" pp={self.pp}" if self.pp > 1 else "")
        return f"{size} on {'+'.join(self.nodes)}"


@dataclass
class ReplicaFit:
    replica: Replica
    errors: list[str] = field(default_factory=list)
    fits: bool | None = None  # None: memory unknown (no model facts or GPU facts)
    weights_gib: float | None = None  # target weights per rank
    kv_tokens: int | None = None
    max_running_requests: int | None = None

    def to_json(self) -> dict:
        return {
            "replica": self.replica.describe(),
            "errors": self.errors,
            "fits": self.fits,
            "weights_per_rank_gib": self.weights_gib,
            "kv_tokens": self.kv_tokens,
            "max_running_requests": self.max_running_requests,
        }


@dataclass
class LayoutOption:
    name: str
    replicas: list[ReplicaFit]
    idle: list[str]
    shape: str
    mode: dict | None  # the `modes:` entry that runs it, or None when one mode cannot say it

    @property
    def works(self) -> bool:
        return all(not r.errors and r.fits is not False for r in self.replicas)

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "works": self.works,
            "replicas": [r.to_json() for r in self.replicas],
            "idle": self.idle,
            "shape": self.shape,
            "mode": self.mode,
        }


def candidates(nodes: list[str]) -> list[tuple[str, list[Replica], list[str], str, dict | None]]:
    """(name, replicas, idle nodes, throughput shape, mode entry) for n single-GPU boxes."""
    n, all_ = len(nodes), tuple(nodes)
    out = [
        (f"tp{n}", [Replica(all_, tp=n)], [], SHAPES["tp"], {"nodes": nodes, "tp": n}),
        (f"pp{n}", [Replica(all_, pp=n)], [], SHAPES["pp"].format(n=n), {"nodes": nodes, "pp": n}),
    ]
    if n >= 3:
        two, rest = tuple(nodes[:2]), nodes[2:]
        mixed = [Replica(two, tp=2), *(Replica((r,)) for r in rest)]
        shape = SHAPES["mixed"].format(r=len(mixed), tp=2, agg=f"{1.5 + len(rest):g}")
        out.append((f"tp2+{len(rest)}solo", mixed, [], shape, None))
        idle = SHAPES["idle"].format(tp=2, idle=", ".join(rest))
        out.append(("tp2-idle", [Replica(two, tp=2)], rest, idle, {"nodes": list(two), "tp": 2}))
    out.append(
        (
            f"dp{n}",
            [Replica((x,)) for x in nodes],
            [],
            SHAPES["dp"].format(n=n),
            {"nodes": nodes, "replicas": n},
        )
    )
    return out


def judge_replica(
    profile, rep: Replica, target, draft, probed: dict[str, list[GpuFacts]] | None, margin, build
) -> ReplicaFit:
    """The mode's rules and memory planner on one replica shape (a synthetic mode of the profile);
    `build(profile, mode_name) -> Plan` is planning's build_plan."""
    from sparkctl.profile.schema import Mode

    name = "__layout__"
    mode = Mode(nodes=list(rep.nodes), tp=rep.tp, pp=rep.pp)
    synthetic = profile.model_copy(update={"modes": {**profile.modes, name: mode}})
    plan = build(synthetic, name)
    ctx: LaunchContext = context_for(
        plan, synthetic, target=target, draft=draft, probed=probed, margin=margin
    )
    argv = plan.ranks[0].argv
    errors = [f.message for f in rule_findings(argv, ctx) if f.severity is Severity.ERROR]
    mem = memory_plan(argv, ctx)
    if mem is None:
        return ReplicaFit(rep, errors)
    return ReplicaFit(
        rep,
        errors,
        mem.fits,
        round(mem.target_weights_per_rank / GIB, 2),
        mem.kv_tokens,
        mem.max_running_requests,
    )


def propose_layouts(
    profile, nodes: list[str], target, draft, *, build, probed=None, margin=None
) -> list[LayoutOption]:
    """Every candidate layout of these boxes, judged; the ones that work first (stable order)."""
    out = []
    for name, reps, idle, shape, mode in candidates(nodes):
        fits = {
            r: judge_replica(profile, r, target, draft, probed, margin, build) for r in dict.fromkeys(reps)
        }
        out.append(LayoutOption(name, [fits[r] for r in reps], idle, shape, mode))
    return sorted(out, key=lambda o: not o.works)


def needs_layouts(findings) -> bool:
    """Whether the mode failed on how it splits the model over its nodes (heads, tp over nodes)."""
    return any(f.check in ("TpVsHeads", "TpNodes") and f.severity is Severity.ERROR for f in findings)
