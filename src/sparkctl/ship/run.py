"""The body of `ship()`: states of all nodes, sources, then every peer in parallel."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sparkctl.errors import SparkctlError
from sparkctl.fanout import fan_out
from sparkctl.profile.derived import hf_cache_for, image_ref
from sparkctl.ship.errors import ShipError
from sparkctl.ship.hints import image_hint, remember_image
from sparkctl.ship.hop import Transfers, hop_argv
from sparkctl.ship.progress import Progress
from sparkctl.ship.report import ShipReport, raise_first
from sparkctl.ship.sources import (
    complete_images,
    gather,
    image_codec,
    image_source,
    manifest_of,
    model_source,
    preference,
    stream_bound,
)

if TYPE_CHECKING:
    from sparkctl.connectors.pool import NodePool
    from sparkctl.profile.schema import ModelRef, Profile
    from sparkctl.remote.manifest import Manifest
    from sparkctl.ship.image import SourceImage


@dataclass(frozen=True)
class ShipOptions:
    """How `ship` compares and sends, the same for every item."""

    check_space: bool = True
    dry_run: bool = False
    deep: bool = False  # `--verify`: every byte rehashed on every node instead of the quick check
    streams: int | None = None  # parallel weights streams (None: from the spare cores of source and peers)
    compress: bool = True  # the image through zstd -1 on the link when every end of its push has zstd


@dataclass
class ShipItem:
    """One thing to ship from its source node: the image, or one model with its source's manifest."""

    what: str  # "image" or "weights <model id>"
    source: str
    image: SourceImage | None = None
    model: ModelRef | None = None
    manifest: Manifest | None = None
    peers: list[str] = field(default_factory=list)  # the reachable targets that may lack it


def run_ship(
    profile: Profile,
    pool: NodePool,
    mode_nodes: list[str],
    image: bool,
    weights: bool,
    to: list[str] | None,
    source: str | None,
    progress: Progress,
    opts: ShipOptions,
    transfers: Transfers,
    raise_on_error: bool,
) -> ShipReport:

    wanted = to or mode_nodes
    order = [source] if source else preference(profile, mode_nodes, wanted)
    ref = image_ref(profile)[0] if image else None  # every rank's image (planning/build.py)
    models = (
        [profile.model.target] + ([profile.model.draft] if profile.model.draft else []) if weights else []
    )
    nodes = list(dict.fromkeys([*order, *wanted]))
    want = (profile.image.id or image_hint(profile.cluster, order, ref)) if ref is not None else None
    states = gather(profile, pool, nodes, ref, models, deep=opts.deep, cancel=transfers.cancel, want=want)
    if source and states[source].error is not None:
        raise states[source].error
    items: list[ShipItem] = []
    if ref is not None:
        items.append(_image_item(profile, pool, states, order, wanted, ref, transfers))
    for m in models:
        src = model_source(profile, states, order, m)
        manifest = manifest_of(profile, src, m, states[src].models[m.id])
        items.append(ShipItem(f"weights {m.id}", src, model=m, manifest=manifest))
    first = items[0].source if items else (source or order[0])
    targets = [n for n in wanted if any(n != it.source for it in items)]
    report = ShipReport(source=first, targets=targets, check="deep" if opts.deep else "quick")
    if not any(n != it.source for n in targets for it in items):
        report.targets = []
        return report

    jobs: list[ShipItem] = []  # the items some reachable peer may need
    for it in items:
        it.peers = [n for n in targets if n != it.source and _cannot_take(states[n], it.what) is None]
        for n in targets:
            err = _cannot_take(states[n], it.what)
            if n != it.source and err is not None and not any(e[0] == n for e in report.errors):
                report.errors.append(
                    (n, "connect", err if isinstance(err, SparkctlError) else ShipError(str(err), node=n))
                )
        if it.peers:
            jobs.append(it)

    def one(i: int) -> dict:
        return _item(profile, pool, states, jobs[i], progress, opts, transfers)

    # The image and the weights move at the same time (their sources and links are busy with one
    # each; the peer's `docker load` is mostly engine CPU while the weights stream).
    outs = fan_out(range(len(jobs)), one, cancel=transfers.cancel, where=lambda i: (None, None))
    for i, job in enumerate(jobs):
        outcome = outs[i]
        if not outcome.ok:
            raise outcome.error
        for node in job.peers:
            res = outcome.value.get(node)
            if isinstance(res, SparkctlError):
                if res.node is None:
                    res.node = node
                report.errors.append((node, job.what, res))
            elif res is not None:
                report.results.append(res)
    if report.errors and raise_on_error:
        raise_first(report)
    return report


def _image_item(profile, pool, states, order, wanted, ref: str, transfers: Transfers) -> ShipItem:  # noqa: PLR0913
    """The image's source; the layers and sizes of the nodes that answered short and now need them;
    the source's ID kept as the next run's hint."""
    from sparkctl.ship.image import source_image

    src = image_source(states, order, ref, profile.image.id)
    complete_images(pool, states, src, wanted, ref, transfers.cancel)
    remember_image(profile.cluster, src, ref, states[src].image["id"])
    return ShipItem("image", src, image=source_image(src, ref, states[src].image))


def _cannot_take(state, what: str) -> BaseException | None:  # NodeState
    """Why a node cannot take this item: unreachable, or (for the image) its Docker not answering."""
    return state.error or (state.docker_error if what == "image" else None)


def _item(profile, pool, states, item: ShipItem, progress, opts: ShipOptions, transfers):  # noqa: PLR0913
    """One item (the image, or one model) from its source to every peer that lacks it: per peer, its
    result or its error."""
    from sparkctl.fanout import Cancelled

    what, src, peers = item.what, item.source, item.peers
    try:
        src_conn = pool.get(src)
        conns = {n: pool.get(n) for n in peers}
        if what == "image":
            from sparkctl.ship.image import Peer, ship_image

            group = [Peer(conns[n], states[n].image or {}, hop_argv(profile, n)) for n in peers]
            out = ship_image(
                item.image,
                src_conn,
                group,
                transfers,
                progress,
                check_space=opts.check_space,
                dry_run=opts.dry_run,
                codec=image_codec(states, [src, *peers], opts.compress),
            )
        else:
            from sparkctl.ship.weights import WeightsPeer, ship_weights

            ref, manifest = item.model, item.manifest
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
                streams=opts.streams or stream_bound(states, [src, *peers]),
                deep=opts.deep,
                check_space=opts.check_space,
                dry_run=opts.dry_run,
            )
    except Cancelled:
        raise
    except SparkctlError as exc:
        out = {n: exc for n in peers}
    except (OSError, ValueError, KeyError) as exc:  # a node answered something unexpected
        out = {n: ShipError(f"{what}: {exc}", node=n) for n in peers}
    return out
