"""`sparkctl ship`: the image and the weights from the node that has them to every node that lacks
them, peers in parallel, skipping what is already there and never leaving a half-done copy.

Entry point for other commands (`up` offers to ship what preflight found missing):

    report = ship(profile, plan, pool, image=True, weights=True, progress=RichProgress())
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sparkctl.errors import SparkctlError, UsageError
from sparkctl.plan import hf_cache_for
from sparkctl.ship.errors import RERUN, DiskFullError, ShipError, SourceMissingError
from sparkctl.ship.manifest import Manifest, snapshot_manifest
from sparkctl.ship.progress import ByteCounter, NullProgress, Progress, RichProgress

if TYPE_CHECKING:
    from sparkctl.connectors.pool import NodePool
    from sparkctl.plan import Plan
    from sparkctl.profile.schema import Profile

__all__ = [
    "ByteCounter",
    "DiskFullError",
    "Manifest",
    "NullProgress",
    "RichProgress",
    "ShipError",
    "ShipReport",
    "SourceMissingError",
    "ship",
    "snapshot_manifest",
]


@dataclass
class ShipReport:
    source: str
    targets: list[str]
    results: list = field(default_factory=list)  # ImageResult | WeightsResult
    errors: list[tuple[str, str, SparkctlError]] = field(default_factory=list)  # (node, what, error)

    @property
    def bytes_sent(self) -> int:
        return sum(r.bytes_sent for r in self.results)

    @property
    def ok(self) -> bool:
        return not self.errors

    def to_json(self) -> dict:
        return {
            "source": self.source,
            "targets": self.targets,
            "ok": self.ok,
            "bytes_sent": self.bytes_sent,
            "results": [r.to_json() for r in self.results],
            "errors": [{"node": n, "what": w, "error": e.message, "fix": e.fix} for n, w, e in self.errors],
        }


def default_source(profile: Profile, nodes: list[str]) -> str:
    """The local node when the mode has one (data moves from where sparkctl runs), else rank 0."""
    for name in nodes:
        if profile.node(name).is_local:
            return name
    return nodes[0]


def ship(
    profile: Profile,
    plan: Plan | None = None,
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
) -> ShipReport:
    """Ship to `to` (default: every node of the plan's mode but the source).

    Every peer and item runs to its end; then, if any failed and `raise_on_error`, the first
    failure is raised (a SparkctlError subclass, e.g. DiskFullError) with `.report` attached.
    """
    from sparkctl.connectors.pool import NodePool
    from sparkctl.fanout import fan_out

    names = [n.name for n in profile.nodes]
    mode_nodes = plan.nodes if plan is not None else names
    for name in [*(to or []), *([source] if source else [])]:
        if name not in names:
            raise UsageError(f"unknown node '{name}'", fix=f"nodes in this profile: {', '.join(names)}")
    src = source or default_source(profile, mode_nodes)
    targets = [n for n in (to or mode_nodes) if n != src]
    progress = progress or NullProgress()
    report = ShipReport(source=src, targets=targets)
    if not targets:
        return report
    own_pool = pool is None
    pool = pool or NodePool(profile)
    try:
        src_conn = pool.get(src)
        src_image = None
        if image:
            from sparkctl.plan import image_ref
            from sparkctl.ship.image import inspect_source

            ref = plan.ranks[0].image if plan is not None else image_ref(profile)[0]
            src_image = inspect_source(src_conn.docker(), ref, src, profile.image.id)
        manifests: list[Manifest] = []
        if weights:
            refs = [profile.model.target] + ([profile.model.draft] if profile.model.draft else [])
            for ref in refs:
                m = snapshot_manifest(src_conn, hf_cache_for(profile, src), ref, lazy=True)
                if not m.present:
                    why = (
                        f"{len(m.broken)} file(s) of it are missing"
                        if m.broken
                        else "it is not in the HF cache"
                    )
                    raise SourceMissingError(
                        f"{ref.id}@{m.revision}: {why} under {hf_cache_for(profile, src)}",
                        node=src,
                        fix="download it there first (`huggingface-cli download "
                        f"{ref.id}{' --revision ' + ref.revision if ref.revision else ''}`), or use --from",
                    )
                manifests.append(m)

        def one_peer(peer_name: str) -> None:
            peer = pool.get(peer_name)
            if src_image is not None:
                from sparkctl.ship.image import ship_image

                _record(report, peer_name, "image", lambda: ship_image(
                    src_image, src_conn, peer, progress, check_space=check_space, dry_run=dry_run))  # fmt: skip
            for m in manifests:
                from sparkctl.ship.weights import ship_weights

                cache = hf_cache_for(profile, peer_name)
                _record(report, peer_name, f"weights {m.model_id}", lambda m=m, cache=cache: ship_weights(
                    m, src_conn, peer, cache, progress, check_space=check_space, dry_run=dry_run))  # fmt: skip

        for o in fan_out(targets, one_peer).failed:
            if not isinstance(o.error, SparkctlError):
                raise o.error  # type: ignore[misc] - a bug, or Ctrl-C: not a peer's result
            report.errors.append((o.key, "connect", o.error))
    finally:
        if own_pool:
            pool.close()
    if report.errors and raise_on_error:
        _raise_errors(report)
    return report


def _raise_errors(report: ShipReport) -> None:
    """The first failure as itself (its type and exit code), naming the others, `.report` attached."""
    from sparkctl.fanout import Outcome, Results

    try:
        Results(Outcome(f"{n} {w}", error=e) for n, w, e in report.errors).values_or_raise()
    except SparkctlError as exc:
        exc.report = report  # type: ignore[attr-defined]
        raise


def _record(report: ShipReport, node: str, what: str, fn) -> None:  # noqa: ANN001
    import docker.errors
    import requests

    try:
        report.results.append(fn())
    except SparkctlError as exc:
        if exc.node is None:
            exc.node = node
        report.errors.append((node, what, exc))
    except (docker.errors.DockerException, requests.RequestException) as exc:
        # The engine API refused or broke mid-way: this peer's expected failure, not a crash.
        report.errors.append(
            (node, what, ShipError(f"{what}: Docker engine error: {exc}", node=node, fix=RERUN))
        )
