"""A gated start (memory.gated_start; the plan's GroupSpec.gate, planning/launch_gate.py): admission
on every node of a group at the moment every rank has rendezvoused, before any rank allocates GPU
memory; then the gate opens, or every rank is stopped.

The engine's ranks block at the gate right after the distributed rendezvous; rank 0 answers the
gate's health path only from then on, so that answer means every rank joined. `open_gates` runs
after every rank of the plan was started and before readiness is polled:

1. **Wait** until rank 0's gate answers (asked from rank 0's own node: the gate binds its --host,
   loopback behind the gateway), until the start's deadline;
2. **Admit** (memgate.admit) on the group's unified-memory nodes with what they have now: the
   engine's processes, their CUDA contexts and NCCL buffers included, but no weights and no pools;
3. **Open** the gate (its activate path), or raise: the caller's rollback (`start_group`'s) stops
   every rank it started, none of which has allocated its weights or pools.

A group without a gate is not touched: it starts as before.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from sparkctl.connectors.base import Connector
from sparkctl.connectors.pool import NodePool
from sparkctl.errors import SparkctlError
from sparkctl.lifecycle import memgate
from sparkctl.planning.model import GateSpec, Plan, RankSpec
from sparkctl.profile.memory import unified_nodes
from sparkctl.profile.schema import Profile

POLL_S = 1.0
CALL_TIMEOUT_S = 15.0

# Stdlib only, run with the node's python3 (argv: URL METHOD): one request to the gate, no proxy,
# its HTTP status as JSON ({"error": ...} when nothing answers: the gate is not up yet).
GATE_CALL = """import json,sys,urllib.error,urllib.request
u,m=sys.argv[1],sys.argv[2]
o=urllib.request.build_opener(urllib.request.ProxyHandler({}))
r=urllib.request.Request(u,method=m,data=b"" if m=="POST" else None)
try:
    with o.open(r,timeout=5) as x: print(json.dumps({"status":x.status}))
except urllib.error.HTTPError as e: print(json.dumps({"status":e.code}))
except Exception as e: print(json.dumps({"error":str(e)[:200]}))"""


class GateError(SparkctlError):
    """A gated group whose gate never answered, or did not open."""


def call_argv(url: str, method: str) -> list[str]:
    return ["python3", "-S", "-c", GATE_CALL, url, method]


def parse_call(stdout: str) -> int | None:
    """The gate's HTTP status from GATE_CALL's last line; None when nothing answered."""
    lines = stdout.strip().splitlines()
    try:
        out = json.loads(lines[-1]) if lines else {}
    except ValueError:
        return None
    status = out.get("status") if isinstance(out, dict) else None
    return status if isinstance(status, int) else None


def gate_call(conn: Connector, url: str, method: str) -> int | None:
    return parse_call(conn.run(call_argv(url, method), timeout=CALL_TIMEOUT_S).stdout)


# A rank that exited while its group waits ("rank 1 on spark2 exited (code 1)"), else None.
Dead = Callable[[], "str | None"]


def exited_rank(pool: NodePool, ranks: list[RankSpec]) -> Dead:
    """`dead` for `open_gates`: the first of `ranks` whose container is gone or no longer runs."""
    from sparkctl.runtime import containers

    def first() -> str | None:
        for spec in ranks:
            info = containers.inspect(pool.get(spec.node), spec.container_name)
            if info is None or info.status not in ("created", "running", "restarting"):
                how = "is gone" if info is None else f"exited (code {info.exit_code})"
                return f"rank {spec.node_rank} on {spec.node} ({spec.container_name}) {how}"
        return None

    return first


def wait_at_gate(
    pool: NodePool,
    gate: GateSpec,
    deadline: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    dead: Dead | None = None,
) -> float:
    """Seconds until rank 0's gate answered (every rank rendezvoused); GateError at the deadline,
    or at once when `dead` names a rank that exited (the others would wait for it until then)."""
    conn, t0 = pool.get(gate.node), clock()
    url = gate.url + gate.protocol.health_path
    while gate_call(conn, url, "GET") != 200:
        gone = dead() if dead else None
        if gone:
            raise GateError(
                f"{gone} before the group reached the launch gate (nothing has allocated GPU memory)",
                node=gate.node,
                fix="`sparkctl logs`: that rank's log says why it exited",
            )
        if clock() >= deadline:
            raise GateError(
                f"rank 0's launch gate ({url}) did not answer within {clock() - t0:.0f}s: not every rank "
                "of the group joined the rendezvous (nothing has allocated GPU memory)",
                node=gate.node,
                fix=f"`sparkctl logs`: each rank logs {gate.protocol.waiting_marker!r} once it waits at "
                "the gate; the rank without it did not join (its fabric IP, NCCL_SOCKET_IFNAME, the "
                "rendezvous port, or it died: its log says why); when every rank logs it, rank 0's gate "
                f"server could not bind {gate.host}:{gate.port} (its log: address already in use; "
                "free the port on the node)",
            )
        sleep(POLL_S)
    return clock() - t0


def group_plan(plan: Plan, pos: int) -> Plan:
    """The plan of `plan.groups[pos]` alone. A plan of one group is already that (a rolling
    switch's `Plan.replica(i)`, whose group keeps the full plan's rank indices: cutting it again
    would index past its ranks)."""
    return plan if len(plan.groups) == 1 else plan.replica(pos)


def open_gates(
    profile: Profile,
    pool: NodePool,
    plan: Plan,
    deadline: float,
    say: Callable[[str], None],
    admit: Callable[..., object] = memgate.admit,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    dead: Dead | None = None,
) -> None:
    """Wait, admit, open: each gated group of `plan` in turn (see the module's docstring)."""
    for pos, group in enumerate(plan.groups):
        gate = group.gate
        if gate is None:
            continue
        waited = wait_at_gate(pool, gate, deadline, clock, sleep, dead)
        nodes = unified_nodes(profile, gate.nodes) if profile.memory.admission else []
        say(
            f"replica {group.index}: every rank waits at the launch gate ({waited:.0f}s)"
            + (f"; admission on {', '.join(nodes)}" if nodes else "")
        )
        if nodes:
            try:
                admit(profile, pool, group_plan(plan, pos), nodes)
            except memgate.AdmissionError as exc:
                raise memgate.AdmissionError(
                    f"{exc.message} (refused at the launch gate: every rank had rendezvoused, none had "
                    "allocated GPU memory; every rank of the group is stopped)",
                    node=exc.node,
                    fix=exc.fix,
                ) from exc
        url = gate.url + gate.protocol.activate_path
        status = gate_call(pool.get(gate.node), url, "POST")
        if status != 200:
            raise GateError(
                f"the launch gate did not open (POST {url}: {status or 'no answer'})",
                node=gate.node,
                fix="`sparkctl logs`: rank 0's log says why its gate server stopped",
            )
        say(f"replica {group.index}: launch gate opened on {gate.node}: the ranks load")
