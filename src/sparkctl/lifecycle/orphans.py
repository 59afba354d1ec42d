"""Nodes lost mid-command: say so (exit 5, naming the node), remember what may still run there,
and settle it by container labels the next time the node answers.

A rank whose node stopped answering while `up` rolled back is not "gone": its container may
still run. It is recorded as pending cleanup (state.py); the next `up`, `down` or `status`
that reaches that node removes exactly the recorded container (by name, and only if it still
carries this cluster's label) and says it did.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from sparkctl.connectors.pool import NodePool
from sparkctl.errors import ConnectError, DockerDownError, SparkctlError
from sparkctl.fanout import fan_out
from sparkctl.lifecycle import state
from sparkctl.runtime import containers
from sparkctl.runtime.containers import CLUSTER_LABEL

if TYPE_CHECKING:
    from sparkctl.connectors.base import Connector

T = TypeVar("T")


def is_connection_loss(exc: BaseException) -> bool:
    """True when `exc` means the node (its SSH session or tunnelled Docker API) went away."""
    if isinstance(exc, DockerDownError):  # the node answered; its Docker engine did not
        return False
    if isinstance(exc, ConnectError):
        return True
    if isinstance(exc, SparkctlError) or not isinstance(exc, Exception):
        return False
    if isinstance(exc, (OSError, EOFError)):  # socket closed/reset/refused, timeouts
        return True
    import paramiko
    import requests

    return isinstance(exc, (requests.exceptions.ConnectionError, paramiko.SSHException))


def forget_connection(pool: NodePool, node: str) -> None:
    """Drop a node's dead connection so that the next `pool.get` dials again."""
    with contextlib.suppress(Exception):  # best effort: it is already broken
        conn = pool._connectors.get(node)  # noqa: SLF001 - the pool has no public drop yet
        if conn is not None:
            conn.close()


def on_node(pool: NodePool, node: str, fn: Callable[[Connector], T]) -> T:
    """fn(connector); a connection found dead (a node back after a loss) is dialled once more."""
    try:
        return fn(pool.get(node))
    except Exception as exc:
        if not is_connection_loss(exc):
            raise
        forget_connection(pool, node)
        return fn(pool.get(node))


def lost(
    node: str, rank: int | None, exc: BaseException, doing: str, had_connection: bool = False
) -> ConnectError:
    """The error for a node gone while `doing`; `had_connection`: this run already talked to it
    (a rank started or watched there), so a failed redial is still a lost connection."""
    detail = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    if isinstance(exc, ConnectError) and not isinstance(exc, DockerDownError) and not had_connection:
        # the connector's own error on first contact: the dial failed, there was no connection to lose
        return ConnectError(
            f"cannot reach node {node} while {doing}: {detail}",
            node=node,
            rank=rank,
            fix=exc.fix or f"check that {node} is up and its sshd answers (`ssh {node} true`)",
        )
    return ConnectError(
        f"lost the connection to node {node} while {doing}: {detail}",
        node=node,
        rank=rank,
        fix=f"check that {node} is up and its sshd answers (`ssh {node} true`)",
    )


def record_leftovers(cluster: str, items: list[state.Pending]) -> str:
    """Record containers that may still run on lost nodes; the sentence telling the user so."""
    if not items:
        return ""
    with contextlib.suppress(OSError):
        state.add_pending(cluster, items)
    nodes = ", ".join(dict.fromkeys(p.node for p in items))
    what = "; ".join(f"rank {p.rank} ({p.container})" if p.rank is not None else p.container for p in items)
    return (
        f"{what} may still be running on {nodes}: recorded for cleanup; the next `sparkctl up`, "
        f"`down` or `status` that reaches {nodes} removes it"
    )


def pending_item(node: str, container: str, rank: int | None, mode: str | None, why: str) -> state.Pending:
    return state.Pending(node, container, rank, mode, time.time(), why)


def settle_pending(
    pool: NodePool, cluster: str, nodes: list[str] | None = None
) -> tuple[list[str], dict[str, str]]:
    """Remove the recorded leftovers on every node that answers now (SIGKILL: they were meant to
    be gone). Returns (what was done, one line each; {node: why} for nodes still unreachable)."""
    owed = [p for p in state.pending(cluster) if nodes is None or p.node in nodes]
    if not owed:
        return [], {}
    by_node: dict[str, list[state.Pending]] = {}
    for p in owed:
        by_node.setdefault(p.node, []).append(p)

    def settle_on(conn: Connector) -> list[str]:
        node = conn.node
        found = {c.name: c for c in containers.list_cluster(conn, cluster)}
        done = []
        for p in by_node[node]:
            c = found.get(p.container)
            if c is not None and c.labels.get(CLUSTER_LABEL) == cluster:
                containers.remove(conn, p.container, grace=None)
                done.append(f"{node} reachable again: removed {p.describe()} ({c.status})")
            else:
                done.append(f"{node} reachable again: {p.describe()} is already gone")
        state.drop_pending(cluster, by_node[node])
        return done

    results = fan_out(list(by_node), lambda node: on_node(pool, node, settle_on))
    messages = [line for lines in results.ok.values() for line in lines]
    unreachable = {n: getattr(e, "message", None) or str(e) for n, e in results.errors.items()}
    return messages, unreachable
