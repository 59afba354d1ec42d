"""The body of `ship()`: states of all nodes, sources, then every peer in parallel."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkctl.errors import SparkctlError
from sparkctl.fanout import fan_out
from sparkctl.ship.errors import ShipError
from sparkctl.ship.hop import Transfers, hop_argv
from sparkctl.ship.manifest import hf_cache_for
from sparkctl.ship.progress import Progress
from sparkctl.ship.sources import gather, image_source, manifest_of, model_source, preference

if TYPE_CHECKING:
    from sparkctl.connectors.pool import NodePool
    from sparkctl.plan import Plan
    from sparkctl.profile.schema import Profile
    from sparkctl.ship import ShipReport


def run_ship(profile: Profile, plan: Plan | None, pool: NodePool, mode_nodes: list[str], image: bool,
             weights: bool, to: list[str] | None, source: str | None, progress: Progress, opts: dict,
             transfers: Transfers, raise_on_error: bool) -> ShipReport:  # fmt: skip
    from sparkctl.ship import ShipReport, default_streams, raise_first

    order = [source] if source else preference(profile, mode_nodes)
    wanted = to or mode_nodes
    ref = None
    if image:
        from sparkctl.plan import image_ref

        ref = plan.ranks[0].image if plan is not None else image_ref(profile)[0]
    models = [profile.model.target] + ([profile.model.draft] if profile.model.draft else []) if weights else []
    nodes = list(dict.fromkeys([*order, *wanted]))
    states = gather(profile, pool, nodes, ref, models, deep=opts["deep"], cancel=transfers.cancel)
    if source and states[source].error is not None:
        raise states[source].error
    items: list[tuple[str, str, object]] = []  # (what, source node, SourceImage | (ModelRef, Manifest))
    if ref is not None:
        from sparkctl.ship.image import source_image

        src = image_source(states, order, ref, profile.image.id)
        items.append(("image", src, source_image(src, ref, states[src].image)))
    for m in models:
        src = model_source(profile, states, order, m)
        items.append((f"weights {m.id}", src, (m, manifest_of(profile, src, m, states[src].models[m.id]))))
    first = items[0][1] if items else (source or order[0])
    targets = [n for n in wanted if any(n != src for _w, src, _x in items)]
    report = ShipReport(source=first, targets=targets, check="deep" if opts["deep"] else "quick")
    if not any(n != src for n in targets for _w, src, _x in items):
        report.targets = []
        return report

    def one_peer(peer_name: str) -> None:
        if states[peer_name].error is not None:
            raise states[peer_name].error
        peer = pool.get(peer_name)
        for what, src, obj in items:
            if src == peer_name:
                continue
            _record(report, peer_name, what, lambda what=what, src=src, obj=obj: _one(
                profile, pool, states, peer, what, src, obj, progress, opts, transfers, default_streams))  # fmt: skip

    for outcome in fan_out(targets, one_peer, cancel=transfers.cancel).values():
        if not outcome.ok:
            if not isinstance(outcome.error, SparkctlError):
                raise outcome.error
            report.errors.append((str(outcome.key), "connect", outcome.error))
    if report.errors and raise_on_error:
        raise_first(report)
    return report


def _one(profile, pool, states, peer, what, src, obj, progress, opts, transfers, default_streams):  # noqa: ANN001, ANN202, PLR0913
    src_conn = pool.get(src)
    hop = hop_argv(profile, peer.node)
    if what == "image":
        from sparkctl.ship.image import ship_image

        return ship_image(obj, src_conn, peer, states[peer.node].image or {}, hop, transfers, progress,
                          check_space=opts["check_space"], dry_run=opts["dry_run"])  # fmt: skip
    from sparkctl.ship.weights import ship_weights

    ref, manifest = obj
    streams = opts["streams"] or default_streams(states[src].cores)
    return ship_weights(manifest, src_conn, peer, hf_cache_for(profile, peer.node), progress, hop=hop,
                        transfers=transfers, peer_doc=states[peer.node].models.get(ref.id), streams=streams,
                        deep=opts["deep"], check_space=opts["check_space"], dry_run=opts["dry_run"])  # fmt: skip


def _record(report: ShipReport, node: str, what: str, fn) -> None:  # noqa: ANN001
    from sparkctl.fanout import Cancelled

    try:
        report.results.append(fn())
    except Cancelled:
        raise
    except SparkctlError as exc:
        if exc.node is None:
            exc.node = node
        report.errors.append((node, what, exc))
    except (OSError, ValueError, KeyError) as exc:  # a node answered something unexpected: that peer's failure
        report.errors.append((node, what, ShipError(f"{what}: {exc}", node=node)))
