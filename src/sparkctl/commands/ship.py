"""`sparkctl ship [MODE]`: copy the image and the weights to every node of the mode that lacks them."""

from __future__ import annotations

import contextlib
from typing import Annotated

import typer

from sparkctl.commands._common import JsonOpt, ProfileOpt, console, handle_errors, load_service, print_json

ModeArg = Annotated[
    str | None,
    typer.Argument(metavar="MODE", help="Mode whose nodes get the files (default: the default mode)."),
]


@handle_errors
def ship_cmd(
    mode: ModeArg = None,
    image: Annotated[
        bool, typer.Option("--image", help="Ship the image (default: image and weights).")
    ] = False,
    weights: Annotated[bool, typer.Option("--weights", help="Ship the weights (target and draft).")] = False,
    to: Annotated[
        list[str] | None,
        typer.Option(
            "--to", metavar="NODE", help="Only to this node (repeatable; default: the mode's nodes)."
        ),
    ] = None,
    from_node: Annotated[
        str | None,
        typer.Option(
            "--from",
            metavar="NODE",
            help="Source node (default: the first that holds it: the local node, then rank order).",
        ),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", help="Compare and say what would be sent (bytes, layers, files); send nothing."
        ),
    ] = False,
    verify: Annotated[
        bool,
        typer.Option(
            "--verify",
            help="Rehash every byte on every node instead of trusting the quick check "
            "(size+mtime+inode, like rsync): catches a file changed in place with its mtime restored.",
        ),
    ] = False,
    streams: Annotated[
        int | None,
        typer.Option(
            "--streams",
            min=1,
            max=64,
            help="Parallel streams per peer for weights (default: from the source's cores).",
        ),
    ] = None,
    compress: Annotated[
        bool,
        typer.Option(
            "--compress/--no-compress",
            help="Send the image through `zstd -1` on the link when the source and every peer have "
            "zstd (docs/shipping.md); weights always go as they are.",
        ),
    ] = True,
    drop_caches: Annotated[
        bool,
        typer.Option(
            "--drop-caches",
            help="Afterwards, drop the page cache the transfer left on unified-memory nodes (GB10; "
            "root or passwordless sudo on the node; docs/memory.md).",
        ),
    ] = False,
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Ship what a node lacks: same image ID (only missing layers move), same weights (sha256 per file).

    The bytes go from the node that holds them straight to each peer (SSH between the nodes, over
    the fabric address when there is one), never through this machine; several peers get one stream
    that each relays to the next. A rerun after any interruption resends only what did not arrive intact.
    """
    from sparkctl.connectors.pool import NodePool
    from sparkctl.profile.derived import mode_nodes

    prof, mode = load_service(profile, mode)
    nodes = mode_nodes(prof, mode)  # no plan: a re-ship needs the mode's nodes, not its launch lines
    both = not image and not weights
    with NodePool(prof) as pool:
        known = {n.name for n in prof.nodes}
        pool.warm(n for n in dict.fromkeys([*nodes, *(to or []), from_node]) if n in known)
        # Imported while the nodes' handshakes run (pool.warm): ~30 ms of a re-ship.
        from sparkctl.errors import SparkctlError
        from sparkctl.ship import NullProgress
        from sparkctl.ship import ship as do_ship
        from sparkctl.ship.progress import make_progress

        quiet = json_out or dry_run  # no live display: rich is not even imported (a re-ship is ~0.3 s)
        display = NullProgress() if quiet else make_progress(console(stderr=True))
        try:
            live = contextlib.nullcontext() if isinstance(display, NullProgress) else display
            with live:
                report = do_ship(
                    prof,
                    nodes,
                    pool,
                    image=image or both,
                    weights=weights or both,
                    to=to or None,
                    source=from_node,
                    progress=display,
                    dry_run=dry_run,
                    verify=verify,
                    streams=streams,
                    compress=compress,
                )
        except SparkctlError as exc:
            if getattr(exc, "report", None) is not None:
                if json_out:  # one JSON object on failure: the report goes inside the error
                    exc.json_extra = {"report": exc.report.to_json()}  # type: ignore[attr-defined]
                else:
                    _render(exc.report, json_out)
            raise
        from sparkctl.ship import pagecache

        cache = pagecache.notes(prof, report, threshold=1 if drop_caches else pagecache.NOTE_BYTES)
        if drop_caches and cache and not dry_run:
            cache = pagecache.drop(pool, cache)
    _render(report, json_out, cache)


def _render(report, json_out: bool, cache: list | None = None) -> None:  # ShipReport, [CacheNote]
    if json_out:  # before rich is imported: --json never loads it (~8 ms of a re-ship)
        print_json({**report.to_json(), "page_cache": [c.to_json() for c in cache or []]})
        return
    from rich.markup import escape

    from sparkctl.units import human_bytes

    out = console()
    if not report.targets:
        out.print(f"nothing to ship: the mode has no node other than the source {report.source}")
        return
    for r in report.results:
        what = "image" if r.to_json()["what"] == "image" else r.model
        how = ""
        if what != "image":
            how = (
                " (every byte rehashed)"
                if r.check == "deep"
                else " (quick check: size+mtime+inode, like rsync)"
            )
        if r.action == "skipped":
            out.print(f"[green]ok[/] {r.node} {what}: already identical{how}, nothing sent")
        elif r.action == "would ship":
            unit = f"{r.layers_sent} layer(s)" if what == "image" else f"{r.files_sent} file(s)"
            out.print(f"[yellow]dry run[/] {r.node} {what}: would send {unit}, {human_bytes(r.bytes_sent)}")
        else:
            wire = getattr(r, "wire_bytes", None)
            on_wire = f" ({human_bytes(wire)} on the wire, {r.codec})" if wire is not None else ""
            out.print(
                f"[green]ok[/] {r.node} {what}: {r.action} from {r.source}, {human_bytes(r.bytes_sent)} sent"
                f"{on_wire} in {r.seconds:.1f}s, verified"
            )
    for node, what, exc in report.errors:
        out.print(f"[red]failed[/] {node} {what}: {exc.message}")
    for note in cache or []:
        out.print(
            ("[green]page cache[/] " if note.dropped else "[yellow]page cache[/] ") + escape(note.line())
        )


def register(app: typer.Typer) -> None:
    app.command("ship")(ship_cmd)
