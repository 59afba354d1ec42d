"""The unified-memory guard, controller side: ship the node program (`sparkctl/node/guard/memsense.py` +
`memguard.py`, stdlib only, as one file), start it on every guarded node before ranks start, stop
it on `down`, and read what it saw (its last sample and its trips) for `status`, `top` and `logs`.

The guard itself runs on the node, detached (docs/memory.md): it keeps guarding when the
controller goes away, and it only ever kills containers labelled with this cluster.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from functools import cache
from pathlib import Path

from sparkctl.connectors.pool import NodePool
from sparkctl.errors import SparkctlError
from sparkctl.fanout import fan_out
from sparkctl.lifecycle import state
from sparkctl.node.guard.memguard import BOOT
from sparkctl.node.pack import PYTHON, pack
from sparkctl.profile.memory import unified_nodes
from sparkctl.profile.schema import Profile
from sparkctl.remote.ops import parse_op_result
from sparkctl.units import human_bytes

GIB = 1 << 30
NODE_DIR = Path(__file__).resolve().parents[1] / "node" / "guard"
GUARD_DIR = "~/.local/state/sparkctl/guard"


@cache
def program() -> str:
    """node/flock.py, memsense.py then memguard.py as one file (the node program's packer)."""
    return pack(NODE_DIR.parent, ("flock.py", "guard/memsense.py", "guard/memguard.py"))


@cache
def digest() -> str:
    return hashlib.sha256(program().encode()).hexdigest()


def guard_argv(op: str, arg: str) -> list[str]:
    """One op of the program sent on stdin, run by BOOT only when its bytes match the digest."""
    return [*PYTHON, "-c", BOOT, digest(), op, arg]


GUARD_FIX = "the guard needs python3 on the node (DGX OS ships it); `up --no-guard` starts without it"


def guard_op(pool: NodePool, node: str, op: str, arg: str, timeout: float = 30.0) -> dict:
    res = pool.get(node).run(guard_argv(op, arg), input=program().encode(), timeout=timeout)
    return parse_op_result(res, op, what="memory guard", fix=GUARD_FIX)


def node_config(profile: Profile) -> dict:
    g = profile.memory.guard
    return {
        "cluster": profile.cluster,
        "min_available": int(g.min_available_gib * GIB),
        "psi_full_pct": g.psi_full_pct,
        "psi_window_s": g.psi_window_s,
        "interval_s": g.interval_s,
        "fast_interval_s": g.fast_interval_s,
        "horizon_s": g.horizon_s,
        "kernel_patterns": list(g.kernel_patterns),
        "idle_exit_s": g.idle_exit_s,
    }


def guarded_nodes(profile: Profile, nodes: list[str]) -> list[str]:
    """The nodes the guard runs on: `memory.guard.enabled` true (all), false (none), auto (the
    unified-memory nodes)."""
    enabled = profile.memory.guard.enabled
    if enabled is True:
        return list(dict.fromkeys(nodes))
    return unified_nodes(profile, nodes) if enabled == "auto" else []


def with_guard(profile: Profile, on: bool | None) -> Profile:
    """The profile with `up --guard` (True) / `--no-guard` (False) applied; None keeps it."""
    if on is None:
        return profile
    guard = profile.memory.guard.model_copy(update={"enabled": on})
    return profile.model_copy(update={"memory": profile.memory.model_copy(update={"guard": guard})})


def ensure(profile: Profile, pool: NodePool, nodes: list[str]) -> dict[str, dict]:
    """Start the guard on each guarded node of `nodes` (a running one with this config is kept)."""
    todo = guarded_nodes(profile, nodes)
    arg = json.dumps(node_config(profile))
    _remember(profile.cluster, add=todo)
    started = fan_out(todo, lambda n: guard_op(pool, n, "start", arg)).values_or_raise()
    for node, out in started.items():
        if not out.get("pid"):
            raise SparkctlError(
                f"memory guard did not start: {out.get('error', 'no pid')}",
                node=node,
                fix=f"see {GUARD_DIR}/{profile.cluster}.log on the node; `up --no-guard` starts without it",
            )
    return started


def stop(profile: Profile, pool: NodePool, nodes: list[str]) -> dict[str, BaseException]:
    """Stop the cluster's guard on every node that answers; {node: why} for the others."""
    res = fan_out(list(dict.fromkeys(nodes)), lambda n: guard_op(pool, n, "stop", profile.cluster))
    _remember(profile.cluster, drop=list(res.ok))
    return res.errors


def _remember(
    cluster: str, add: tuple[str, ...] | list[str] = (), drop: tuple[str, ...] | list[str] = ()
) -> list[str]:
    """The nodes sparkctl started a guard on (controller state), so `status` and `logs` ask only
    those and the unified ones: a profile without a guard costs them no extra exec."""
    path = state.cluster_file(cluster, ".guards.json")
    known: list[str] = []
    with contextlib.suppress(OSError, ValueError):
        known = list(json.loads(path.read_text()))
    now = [n for n in dict.fromkeys([*known, *add]) if n not in drop]
    if now != known:
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(now))
            os.replace(tmp, path)
    return now


def nodes_to_read(profile: Profile) -> list[str]:
    """Where a guard may have run: the guarded nodes, and those sparkctl started one on."""
    every = [n.name for n in profile.nodes]
    return list(
        dict.fromkeys(
            [*guarded_nodes(profile, every), *(n for n in _remember(profile.cluster) if n in every)]
        )
    )


def read(profile: Profile, pool: NodePool, nodes: list[str]) -> dict[str, dict]:
    """{node: {running, state, trips}} of every node that answers and has run a guard."""
    res = fan_out(list(dict.fromkeys(nodes)), lambda n: guard_op(pool, n, "status", profile.cluster))
    return {n: v for n, v in res.ok.items() if v.get("running") or v.get("state") or v.get("trips")}


def describe_trip(node: str, trip: dict) -> str:
    when = time.strftime("%H:%M:%S", time.localtime(trip.get("at", 0)))
    killed = ", ".join(k.get("name", "?") for k in trip.get("killed", [])) or "nothing"
    avail, total = trip.get("mem_available"), trip.get("mem_total")
    mem = f" (MemAvailable {human_bytes(avail)} of {human_bytes(total)})" if avail and total else ""
    return (
        f"{when} memory guard on {node} tripped: {trip.get('reason', '?')}{mem}; killed {killed}, "
        f"gone {trip.get('gone_ms', 0):.0f} ms after"
    )


def describe(node: str, doc: dict) -> str:
    """One line for `status`: running or not, the floor, what it sees."""
    state = doc.get("state") or {}
    cfg = state.get("config") or {}
    run = doc.get("running")
    head = f"memory guard on {node}: " + (f"running (pid {run.get('pid')})" if run else "not running")
    floor = cfg.get("min_available")
    if floor is not None:
        head += f", trips below {human_bytes(floor)} MemAvailable"
    if run and state.get("mem_available") is not None:
        head += f", now {human_bytes(state['mem_available'])}"
    if run and state.get("kernel_log") not in (None, "watched"):
        head += f"; {state['kernel_log']}"
    return head + (f"; {len(doc.get('trips', []))} trip(s)" if doc.get("trips") else "")
