"""`sparkctl diagnose [MODE] [-o FILE]`: one masked tarball to attach to an issue."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sparkctl.commands._common import JsonOpt, ProfileOpt, console, handle_errors, load_service, print_json


@handle_errors
def diagnose_cmd(
    mode: Annotated[
        str | None, typer.Argument(metavar="MODE", help="Mode to diagnose (default: running, last, default).")
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="The bundle (default: ./sparkctl-diagnose-CLUSTER-TIME.tar.gz)."),
    ] = None,
    tail: Annotated[int, typer.Option("--tail", "-n", min=1, help="Log lines per rank and router.")] = 200,
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Gather the profile (secrets masked), the plan, preflight, status, the events, every rank's and
    the router's last log lines and each node's facts (driver, CUDA, GPUs, RDMA, links, Docker, disk,
    memory, PSI, kernel log) into one tarball; an unreachable node is listed, never waited on."""
    import time

    from sparkctl.connectors import NodePool
    from sparkctl.lifecycle.diagnose import diagnose
    from sparkctl.lifecycle.modes import resolve_mode

    prof, mode = load_service(profile, mode)
    err = console(stderr=True)
    out = output or Path(f"sparkctl-diagnose-{prof.cluster}-{time.strftime('%Y%m%d-%H%M%S')}.tar.gz")
    with NodePool(prof, once=True) as pool:  # a failed node is not asked twice
        try:
            mode = resolve_mode(prof, mode, pool=pool, fallback=("running", "last", "default"))
        except Exception as exc:  # noqa: BLE001 - no mode: the node facts are still worth a bundle
            err.print(f"[yellow]no mode[/]: {getattr(exc, 'message', exc)}")
        result = diagnose(prof, pool, mode, out, tail=tail, progress=lambda s: err.print(f"diagnose: {s}"))
    if json_out:
        print_json({"ok": True, "path": str(result.path), "manifest": result.manifest})
        return
    lost = result.manifest["unreachable"]
    console().print(f"wrote {result.path} ({len(result.manifest['members'])} members)")
    if lost:
        console().print(f"[red]unreachable[/]: {', '.join(lost)} (recorded in the manifest)")
    console().print("secrets are masked; look it over before you attach it to an issue")


def register(app: typer.Typer) -> None:
    app.command("diagnose")(diagnose_cmd)
