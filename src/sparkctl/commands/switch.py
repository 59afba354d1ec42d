"""`sparkctl switch MODE`: onto another mode, replica by replica when the layout allows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from sparkctl.commands._common import GuardOpt, JsonOpt, ProfileOpt, handle_errors

if TYPE_CHECKING:
    pass

from sparkctl.commands.up import (
    DryRunOpt,
    RollingOpt,
    ShipOpt,
    SkipPreflightOpt,
    SuperviseOpt,
    TimeoutOpt,
    UpRequest,
    print_preview,
    run_up,
)


@handle_errors
def switch_cmd(
    mode: Annotated[str, typer.Argument(metavar="MODE", help="Mode to switch to (a fleet: SERVICE MODE).")],
    service_mode: Annotated[
        str | None, typer.Argument(metavar="[MODE]", help="A fleet: the mode of the SERVICE named first.")
    ] = None,
    skip_preflight: SkipPreflightOpt = False,
    timeout: TimeoutOpt = None,
    ship: ShipOpt = None,
    dry_run: DryRunOpt = False,
    supervise: SuperviseOpt = False,
    rolling: RollingOpt = True,
    guard: GuardOpt = None,
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Switch to MODE. Same replica layout behind the same router (e.g. dp2 -> dp2b): replica by
    replica, no failed request (--timeout is per replica); else stop the running mode, start MODE."""
    mode = f"{mode}:{service_mode}" if service_mode else mode
    if dry_run:
        print_preview(profile, mode, None, json_out, rolling)
        return
    run_up(
        UpRequest(
            mode,
            profile,
            skip_preflight=skip_preflight,
            timeout=timeout,
            json_out=json_out,
            verb="switch",
            ship=ship,
            supervise=supervise,
            rolling=rolling,
            guard=guard,
        )
    )


def register(app: typer.Typer) -> None:
    app.command("switch")(switch_cmd)
