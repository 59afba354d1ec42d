"""`sparkctl ship`: the image and the weights from the node that has them to every node that lacks
them, peers in parallel, skipping what is already there and never leaving a half-done copy.

Entry point for other commands (`up` offers to ship what preflight found missing):

    report = ship(profile, plan.nodes, pool, image=True, weights=True, progress=RichProgress())
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkctl.errors import UsageError
from sparkctl.fanout import CancelToken
from sparkctl.profile.derived import hf_cache_for
from sparkctl.remote.manifest import Manifest, snapshot_manifest
from sparkctl.ship.errors import DiskFullError, ShipError, SourceMissingError
from sparkctl.ship.hop import Transfers
from sparkctl.ship.progress import ByteCounter, NullProgress, Progress, RichProgress
from sparkctl.ship.report import ShipReport, raise_first

if TYPE_CHECKING:
    from sparkctl.connectors.pool import NodePool
    from sparkctl.profile.schema import Profile

__all__ = [
    "ByteCounter",
    "DiskFullError",
    "Manifest",
    "NullProgress",
    "Progress",
    "RichProgress",
    "ShipError",
    "ShipReport",
    "SourceMissingError",
    "raise_first",
    "hf_cache_for",
    "ship",
    "snapshot_manifest",
]


def default_source(profile: Profile, nodes: list[str]) -> str:
    """The local node when the mode has one (data moves from where sparkctl runs), else rank 0."""
    for name in nodes:
        if profile.node(name).is_local:
            return name
    return nodes[0]


def default_streams(cores: int, load: float = 0.0) -> int:
    """Parallel streams per peer: one SSH stream per ~4 cores, 1..8, at most half the spare cores."""
    from sparkctl.ship.sources import streams_for

    return streams_for(cores, load)


def ship(
    profile: Profile,
    nodes: list[str] | None = None,
    pool: NodePool | None = None,
    *,
    image: bool = True,
    weights: bool = True,
    to: list[str] | None = None,
    source: str | None = None,
    progress: Progress | None = None,
    check_space: bool = True,
    raise_on_error: bool = True,
    dry_run: bool = False,
    verify: bool = False,
    streams: int | None = None,
    compress: bool = True,
    cancel: CancelToken | None = None,
) -> ShipReport:
    """Ship to `to` (default: every node of `nodes`, a mode's, but the source of each item).

    Each item comes from the node that holds it (`source` forces one); the bytes go from that node
    straight to each peer over SSH between the nodes, never through this process. `verify` rehashes
    every byte on every node instead of trusting the quick check (size+mtime+inode).
    Every peer and item runs to its end; then, if any failed and `raise_on_error`, the first
    failure is raised (a SparkctlError subclass, e.g. DiskFullError) with `.report` attached.
    """
    from sparkctl.connectors.pool import NodePool

    names = [n.name for n in profile.nodes]
    mode_nodes = list(dict.fromkeys(nodes)) if nodes is not None else names
    for name in [*(to or []), *([source] if source else [])]:
        if name not in names:
            raise UsageError(f"unknown node '{name}'", fix=f"nodes in this profile: {', '.join(names)}")
    progress = progress or NullProgress()
    own_pool = pool is None
    pool = pool or NodePool(profile)
    transfers = Transfers(cancel)
    try:
        from sparkctl.ship.run import ShipOptions, run_ship

        return run_ship(
            profile,
            pool,
            mode_nodes,
            image,
            weights,
            to,
            source,
            progress,
            ShipOptions(
                check_space=check_space, dry_run=dry_run, deep=verify, streams=streams, compress=compress
            ),
            transfers,
            raise_on_error,
        )
    except BaseException:
        transfers.stop()  # Ctrl-C or a crash: every push ends now, on every node
        raise
    finally:
        if own_pool:
            pool.close()
