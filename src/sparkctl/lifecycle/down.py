"""`down`: remove every container of this cluster (found by label) on every node of the profile."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from sparkctl.connectors.pool import NodePool
from sparkctl.errors import ConnectError, SparkctlError
from sparkctl.lifecycle import guard as guards
from sparkctl.lifecycle import orphans
from sparkctl.lifecycle.lock import ClusterLock
from sparkctl.lifecycle.steps import remove_all
from sparkctl.lifecycle.supervisor import process as supervisor
from sparkctl.profile.schema import Profile
from sparkctl.runtime import containers
from sparkctl.runtime.containers import ContainerInfo


@dataclass
class DownResult:
    removed: list[ContainerInfo] = field(default_factory=list)
    settled: list[str] = field(default_factory=list)  # leftovers of lost nodes removed now
    supervisor: str | None = None  # what happened to a running supervisor

    def to_json(self) -> dict:
        return {
            "removed": [c.to_json() for c in self.removed],
            "settled": self.settled,
            "supervisor": self.supervisor,
        }


def down(profile: Profile, pool: NodePool, *, lock: bool = True, dry_run: bool = False) -> DownResult:
    """Idempotent: nothing running is success. Reachable nodes are cleaned even if one is not.
    `dry_run` lists what would be removed and removes nothing."""
    result = DownResult()
    if not dry_run:
        # The supervisor first (before the lock, which it holds while restarting the group): else
        # it would see its ranks go and start them again.
        result.supervisor = supervisor.stop(profile.cluster)
    with ClusterLock(profile.cluster) if lock and not dry_run else contextlib.nullcontext():
        if not dry_run:
            result.settled, _ = orphans.settle_pending(pool, profile.cluster)
        found, unreachable = containers.list_nodes(pool, profile.cluster, [n.name for n in profile.nodes])
        result.removed = found
        if not dry_run:
            remove_all(pool, found, grace=profile.engine.stop_grace)
            nodes = guards.nodes_to_read(profile)  # where sparkctl started one
            guards.stop(profile, pool, [n for n in dict.fromkeys(nodes) if n not in unreachable])
        if unreachable:
            raise _unreachable(unreachable, len(found))
        return result


def _unreachable(failed: dict[str, BaseException], removed: int) -> SparkctlError:
    node, exc = next(iter(failed.items()))
    msg = exc.message if isinstance(exc, SparkctlError) else str(exc)
    others = f" (and {len(failed) - 1} more node(s))" if len(failed) > 1 else ""
    lost = orphans.is_connection_loss(exc)
    cls = ConnectError if lost else SparkctlError
    return cls(
        f"could not check node {node} for containers: {msg}{others}; what runs there is unknown; "
        f"removed {removed} container(s) on the other nodes",
        node=node,
        fix=(exc.fix if isinstance(exc, SparkctlError) and exc.fix else "make the node reachable")
        + "; then run `sparkctl down` again",
    )
