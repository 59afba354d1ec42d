"""`down`: remove every container of this cluster (found by label) on every node of the profile."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from sparkctl.connectors.pool import NodePool
from sparkctl.errors import ConnectError, SparkctlError
from sparkctl.lifecycle import containers
from sparkctl.lifecycle.containers import ContainerInfo
from sparkctl.lifecycle.lock import ClusterLock
from sparkctl.lifecycle.up import remove_all
from sparkctl.profile.schema import Profile


@dataclass
class DownResult:
    removed: list[ContainerInfo] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"removed": [c.to_json() for c in self.removed]}


def down(profile: Profile, pool: NodePool, *, lock: bool = True, dry_run: bool = False) -> DownResult:
    """Idempotent: nothing running is success. Reachable nodes are cleaned even if one is not.
    `dry_run` lists what would be removed and removes nothing."""
    with ClusterLock(profile.cluster) if lock and not dry_run else contextlib.nullcontext():
        found, unreachable = containers.list_nodes(pool, profile.cluster, [n.name for n in profile.nodes])
        failed = list(unreachable.items())
        if not dry_run:
            remove_all(pool, found)
        if failed:
            node, exc = failed[0]
            msg = exc.message if isinstance(exc, SparkctlError) else str(exc)
            others = f" (and {len(failed) - 1} more node(s))" if len(failed) > 1 else ""
            cls = ConnectError if isinstance(exc, ConnectError) else SparkctlError
            raise cls(
                f"could not check node {node} for containers: {msg}{others}; "
                f"removed {len(found)} container(s) on the other nodes",
                node=node,
                fix=(exc.fix if isinstance(exc, SparkctlError) and exc.fix else "make the node reachable")
                + "; then run `sparkctl down` again",
            )
        return DownResult(found)
