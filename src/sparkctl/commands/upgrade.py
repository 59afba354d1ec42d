"""`sparkctl upgrade`: the running mode onto the profile's current config, replica by replica."""

from __future__ import annotations

import typer

from sparkctl.commands._common import JsonOpt, ProfileOpt, console, handle_errors, load_profile
from sparkctl.commands.up import RollingOpt, SkipPreflightOpt, TimeoutOpt, UpRequest, run_up


@handle_errors
def upgrade_cmd(
    skip_preflight: SkipPreflightOpt = False,
    timeout: TimeoutOpt = None,
    rolling: RollingOpt = True,
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Restart the running mode onto the profile's current config (e.g. a new image.ref): replica
    by replica behind the router when it has 2+, so clients see no failed request. --timeout is
    per replica."""

    from sparkctl.lifecycle.modes import resolve_mode

    prof = load_profile(profile)
    mode = resolve_mode(
        prof,
        fallback=("running",),
        missing=(
            "no single mode of this profile is running to upgrade",
            "`sparkctl status` shows what runs; `sparkctl switch MODE` names the mode",
        ),
    )
    if prof.modes[mode].replicas < 2 and not json_out:
        console(stderr=True).print(
            f"mode {mode} has 1 replica: upgrading restarts it (requests fail until it is back); "
            "a mode with 2+ replicas behind the router is upgraded one replica at a time"
        )
    run_up(
        UpRequest(
            mode,
            profile,
            skip_preflight=skip_preflight,
            timeout=timeout,
            json_out=json_out,
            verb="upgrade",
            rolling=rolling,
        )
    )


def register(app: typer.Typer) -> None:
    app.command("upgrade")(upgrade_cmd)
