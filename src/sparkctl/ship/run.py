"""The body of `ship()`: states of all nodes, sources, then every peer in parallel."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkctl.errors import SparkctlError
from sparkctl.fanout import fan_out
from sparkctl.planning.build import hf_cache_for
from sparkctl.ship.errors import ShipError
from sparkctl.ship.hop import Transfers, hop_argv
from sparkctl.ship.progress import Progress
from sparkctl.ship.sources import gather, image_source, manifest_of, model_source, preference

if TYPE_CHECKING:
    from sparkctl.connectors.pool import NodePool
    from sparkctl.planning.build import Plan
    from sparkctl.profile.schema import Profile
    from sparkctl.ship import ShipReport


def run_ship(
    profile: Profile,
    plan: Plan | None,
    pool: NodePool,
    mode_nodes: list[str],
    image: bool,
    weights: bool,
    to: list[str] | None,
    source: str | None,
    progress: Progress,
    opts: dict,
    transfers: Transfers,
    raise_on_error: bool,
) -> ShipReport:
    from sparkctl.ship import ShipReport, default_streams, raise_first

    wanted = to or mode_nodes
    order = [source] if source else preference(profile, mode_nodes, wanted)
    ref = None
    if image:
        from sparkctl.planning.build import image_ref

        ref = plan.ranks[0].image if plan is not None else image_ref(profile)[0]
    models = (
        [profile.model.target] + ([profile.model.draft] if profile.model.draft else []) if weights else []
    )
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

    jobs = []  # (what, src, obj, peers): the items some reachable peer may need
    for what, src, obj in items:
        peers = [n for n in targets if n != src and states[n].error is None]
        for n in targets:
            err = states[n].error
            if n != src and err is not None and not any(e[0] == n for e in report.errors):
                report.errors.append(
                    (n, "connect", err if isinstance(err, SparkctlError) else ShipError(str(err), node=n))
                )
        if peers:
            jobs.append((what, src, obj, peers))

    def one(i: int) -> dict:
        what, src, obj, peers = jobs[i]
        return _item(profile, pool, states, what, src, obj, peers, progress, opts, transfers, default_streams)

    # The image and the weights move at the same time (their sources and links are busy with one
    # each; the peer's `docker load` is mostly engine CPU while the weights stream).
    outs = fan_out(range(len(jobs)), one, cancel=transfers.cancel, where=lambda i: (None, None))
    for i, (what, _src, _obj, peers) in enumerate(jobs):
        outcome = outs[i]
        if not outcome.ok:
            raise outcome.error
        for node in peers:
            res = outcome.value.get(node)
            if isinstance(res, SparkctlError):
                if res.node is None:
                    res.node = node
                report.errors.append((node, what, res))
            elif res is not None:
                report.results.append(res)
    if report.errors and raise_on_error:
        raise_first(report)
    return report


def _item(profile, pool, states, what, src, obj, peers, progress, opts, transfers, default_streams):  # noqa: PLR0913
    """One item (the image, or one model) from its source to every peer that lacks it: per peer, its
    result or its error."""
    from sparkctl.fanout import Cancelled

    try:
        src_conn = pool.get(src)
        conns = {n: pool.get(n) for n in peers}
        if what == "image":
            from sparkctl.ship.image import Peer, ship_image

            group = [Peer(conns[n], states[n].image or {}, hop_argv(profile, n)) for n in peers]
            out = ship_image(
                obj,
                src_conn,
                group,
                transfers,
                progress,
                check_space=opts["check_space"],
                dry_run=opts["dry_run"],
            )
        else:
            from sparkctl.ship.weights import WeightsPeer, ship_weights

            ref, manifest = obj
            group = [
                WeightsPeer(
                    conns[n], hf_cache_for(profile, n), hop_argv(profile, n), states[n].models.get(ref.id)
                )
                for n in peers
            ]
            out = ship_weights(
                manifest,
                src_conn,
                group,
                progress,
                transfers=transfers,
                streams=opts["streams"] or default_streams(states[src].cores),
                deep=opts["deep"],
                check_space=opts["check_space"],
                dry_run=opts["dry_run"],
            )
    except Cancelled:
        raise
    except SparkctlError as exc:
        out = {n: exc for n in peers}
    except (OSError, ValueError, KeyError) as exc:  # a node answered something unexpected
        out = {n: ShipError(f"{what}: {exc}", node=n) for n in peers}
    return out
