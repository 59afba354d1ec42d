"""What the supervisor does before it watches: reconcile the cluster with what should run.

After a reboot (the supervisor's systemd unit starting it at boot, `sparkctl persist`), the ranks'
containers are there but exited (they have no restart policy: Docker cannot restart a TP group
in order), a node may not be back yet, and the controller's state file may be gone. `begin`:

1. waits for every node of the mode to answer (SSH and Docker), retrying with a capped backoff,
   logged in the events log; past `NODE_BOUND_S` it records `node_still_down` (shown by
   `status`) and keeps trying every `MAX_BACKOFF_S`, never spinning;
2. rebuilds the state file from the containers' labels (mode, config hash) when it is missing;
3. when nothing of the mode is on the nodes (`down` removed it, or it never ran), waits for an
   `up` instead of starting one (a deliberate `down` stays down across reboots);
4. when the mode's containers are there but not all running, records `reconciling` (each
   rank's state, and the rank that finished first) and hands the plan to the watch loop, which
   restarts the group as for any dead rank (the memory guard asked for the cause, backoff, the
   restart limit; `start_group`: settle and admission first on unified memory, ranks >= 1, then
   rank 0, as `up` does).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sparkctl.connectors.pool import NodePool
from sparkctl.errors import SparkctlError
from sparkctl.lifecycle import orphans, state
from sparkctl.lifecycle.steps import resolve_plan
from sparkctl.lifecycle.supervisor.process import StopFlag
from sparkctl.lifecycle.watch import first_dead
from sparkctl.planning.build import Plan, build_plan
from sparkctl.profile.schema import Profile
from sparkctl.runtime import containers
from sparkctl.runtime.containers import ContainerInfo

NODE_BOUND_S = 300.0  # after this, a node still away is said (event + status) and retried slowly
MAX_BACKOFF_S = 30.0
IDLE_POLL_S = 15.0  # how often an idle supervisor (nothing of the mode on the nodes) looks again


def backoff(attempt: int) -> float:
    return min(MAX_BACKOFF_S, float(2**attempt))


def wait_for_nodes(
    pool: NodePool,
    cluster: str,
    nodes: list[str],
    flag: StopFlag,
    clock: Callable[[], float] = time.monotonic,
) -> list[ContainerInfo] | None:
    """The cluster's containers once every node answers; None when stopped meanwhile."""
    start, attempt, said_down, waiting = clock(), 0, set(), set()
    while True:
        found, failed = containers.list_nodes(pool, cluster, nodes)
        for node in waiting - set(failed):
            state.record_event(cluster, "node_back", node=node, waited_s=round(clock() - start, 1))
        if not failed:
            return found
        for node, exc in failed.items():
            orphans.forget_connection(pool, node)
            why = getattr(exc, "message", None) or str(exc)
            if node not in waiting:
                state.record_event(cluster, "waiting_for_node", node=node, detail=why)
            if clock() - start >= NODE_BOUND_S and node not in said_down:
                state.record_event(
                    cluster, "node_still_down", node=node, detail=why, waited_s=round(clock() - start, 1)
                )
                said_down.add(node)
        waiting = set(failed)
        if flag.wait(backoff(attempt)):
            return None
        attempt += 1


def rebuild_state(cluster: str, mode: str, found: list[ContainerInfo]) -> None:
    """The last-attempt file from the containers' labels, when the controller lost it."""
    if state.last_attempt(cluster):
        return
    hashes = {c.config_hash for c in found if c.mode == mode and c.role == "engine" and c.config_hash}
    if hashes:
        state.record_attempt(cluster, mode, sorted(hashes)[0], "ready")
        state.record_event(cluster, "state_rebuilt", mode=mode, detail="from the containers' labels")


def diff(plan: Plan, found: list[ContainerInfo]) -> tuple[dict, str] | None:
    """(the cause to restart for, what each rank is) when the mode's ranks are there but not all
    running; None when every rank runs, or when nothing of the mode is on the nodes (then there is
    nothing to bring back). The cause names the rank that finished first, as the watch loop's
    does (a peer that exited because it died is not blamed; with replicas, its replica restarts
    and the loop brings back the others)."""
    ours = {c.name: c for c in found if c.mode == plan.mode and c.role == "engine"}
    if not ours:
        return None
    infos = {s.rank: ours.get(s.container_name) for s in plan.ranks}
    dead = first_dead(infos)
    if dead is None:
        return None
    info, spec = infos[dead], plan.rank(dead)
    how = f"exited ({info.describe_exit()})" if info else "disappeared"
    seen = ", ".join(f"rank {r} {c.status if c else 'gone'}" for r, c in infos.items())
    return {"cause": f"rank {dead} on {spec.node} {how}", "rank": dead, "node": spec.node}, seen


def begin(profile: Profile, pool: NodePool, mode: str, flag: StopFlag) -> Plan | None:
    """The resolved plan, once the nodes answer and the mode is on them (what is not running is
    recorded); None when the supervisor was stopped meanwhile."""
    cluster, draft = profile.cluster, build_plan(profile, mode)
    nodes = list(dict.fromkeys([*draft.nodes, *([draft.router.node] if draft.router else [])]))
    idle_said = False
    while True:
        found = wait_for_nodes(pool, cluster, nodes, flag)
        if found is None:
            return None
        if any(c.mode == mode and c.role == "engine" for c in found):
            break
        if not idle_said:
            state.record_event(
                cluster, "idle", mode=mode, detail=f"nothing of mode {mode} on the nodes: waiting for `up`"
            )
            idle_said = True
        if flag.wait(IDLE_POLL_S):
            return None
    rebuild_state(cluster, mode, found)
    try:
        plan = resolve_plan(profile, draft, pool)
    except SparkctlError as exc:  # a node went away again between the two looks: start over
        state.record_event(cluster, "watch_failed", detail=exc.message, node=exc.node)
        return None if flag.wait(MAX_BACKOFF_S) else begin(profile, pool, mode, flag)
    found_diff = diff(plan, found)
    if found_diff is not None:
        cause, seen = found_diff
        state.record_event(cluster, "reconciling", mode=mode, detail=f"reconcile at start: {seen}", **cause)
    return plan
