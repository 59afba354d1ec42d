"""`sparkctl down`: stop and remove every container of the cluster."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from sparkctl.commands._common import JsonOpt, ProfileOpt, console, handle_errors, load_profile, print_json

if TYPE_CHECKING:
    pass

from sparkctl.commands.up import DryRunOpt


@handle_errors
def down_cmd(
    mode: Annotated[
        str | None,
        typer.Argument(
            metavar="MODE", help="Only this mode (default: all); a fleet: SERVICE[:MODE] (default: all)."
        ),
    ] = None,
    profile: ProfileOpt = None,
    dry_run: DryRunOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Stop and remove every container of this cluster on every node (nothing running is fine)."""
    from sparkctl.connectors import NodePool
    from sparkctl.lifecycle.down import down

    prof = load_profile(profile, fleet=True)
    if prof.models:
        from sparkctl.commands.fleet import fleet_down

        fleet_down(prof, mode, dry_run, json_out)
        return
    with NodePool(prof, once=True) as pool:  # a failed node is not asked twice
        result = down(prof, pool, dry_run=dry_run, mode=mode)
    if json_out:
        print_json({**result.to_json(), "dry_run": dry_run})
        return
    out = console()
    for line in filter(None, [result.supervisor, *result.settled]):
        out.print(line, markup=False)
    if not result.removed:
        out.print(f"nothing running for cluster {prof.cluster}")
    verb = "would remove" if dry_run else "removed"
    for c in result.removed:
        out.print(f"{verb} {c.name} on {c.node} ({c.status})")


def register(app: typer.Typer) -> None:
    app.command("down")(down_cmd)
