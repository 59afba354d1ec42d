"""`down`: remove every container of this cluster (found by label) on every node of the profile."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from sparkctl.connectors.pool import NodePool
from sparkctl.errors import ConnectError, DockerDownError, SparkctlError, several
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


def down(
    profile: Profile, pool: NodePool, *, lock: bool = True, dry_run: bool = False, mode: str | None = None
) -> DownResult:
    """Idempotent: nothing running is success. Reachable nodes are cleaned even if one is not.
    `dry_run` lists what would be removed and removes nothing. `mode`: only that mode's ranks (and
    the router, when the mode has replicas), asked on that mode's nodes only."""
    result = DownResult()
    nodes = [n.name for n in profile.nodes]
    if mode is not None:
        nodes = mode_nodes(profile, mode)
    watched = (supervisor.running(profile.cluster) or {}).get("mode")
    if not dry_run and (mode is None or watched in (None, mode)):
        # The supervisor first (before the lock, which it holds while restarting the group): else
        # it would see its ranks go and start them again.
        result.supervisor = supervisor.stop(profile.cluster)
    with ClusterLock(profile.cluster) if lock and not dry_run else contextlib.nullcontext():
        if not dry_run:
            result.settled, _ = orphans.settle_pending(pool, profile.cluster)
        found, unreachable = containers.list_nodes(pool, profile.cluster, nodes)
        if mode is not None:
            found = [c for c in found if of_mode(c, mode, profile)]
        result.removed = found
        if not dry_run:
            remove_all(pool, found, grace=profile.engine.stop_grace)
            nodes = guards.nodes_to_read(profile)  # where sparkctl started one
            guards.stop(profile, pool, [n for n in dict.fromkeys(nodes) if n not in unreachable])
        if unreachable:
            raise _unreachable(unreachable, len(found), "would remove" if dry_run else "removed")
        return result


def mode_nodes(profile: Profile, mode: str) -> list[str]:
    """The nodes holding a rank or the router of `mode` (UsageError with a did-you-mean if unknown)."""
    from sparkctl.planning.build import build_plan

    return build_plan(profile, mode).all_nodes


def of_mode(c: ContainerInfo, mode: str, profile: Profile) -> bool:
    """A container of `mode`: its ranks, or the router when the mode has replicas."""
    from sparkctl.planning.router import ROLE_LABEL

    if c.labels.get(ROLE_LABEL) == "router":
        return profile.modes[mode].replicas > 1
    return c.mode == mode


def _unreachable(failed: dict[str, BaseException], removed: int, verb: str) -> SparkctlError:
    """One error per node that could not be checked (each with its reason and fix); exit 5 when
    any of them is a lost connection or a Docker engine that is not running (README's table)."""
    errors: list[SparkctlError] = []
    for node, exc in failed.items():
        msg = exc.message if isinstance(exc, SparkctlError) else str(exc)
        down = isinstance(exc, DockerDownError)
        cls = ConnectError if down or orphans.is_connection_loss(exc) else SparkctlError
        errors.append(
            cls(
                f"could not check for containers: {msg}; what runs there is unknown",
                node=node,
                fix=(exc.fix if isinstance(exc, SparkctlError) and exc.fix else "make the node reachable")
                + "; then run `sparkctl down` again",
            )
        )
    errors.sort(key=lambda e: not isinstance(e, ConnectError))  # exit 5 when any node was lost
    if removed:
        errors[0].message += f" ({verb} {removed} container(s) on the nodes that answered)"
    return several(errors)
