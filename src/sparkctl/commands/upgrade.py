"""`sparkctl upgrade`: the running mode onto the profile's current config, replica by replica."""

from __future__ import annotations

import typer

from sparkctl.commands._common import JsonOpt, ProfileOpt, console, handle_errors, load_profile
from sparkctl.commands.up import RollingOpt, SkipPreflightOpt, TimeoutOpt, run_up


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
    from sparkctl.connectors import NodePool
    from sparkctl.errors import UsageError
    from sparkctl.lifecycle.status import running_mode

    prof = load_profile(profile)
    with NodePool(prof) as pool:
        mode = running_mode(prof, pool)
    if mode is None:
        raise UsageError(
            "no single mode of this profile is running to upgrade",
            fix="`sparkctl status` shows what runs; `sparkctl switch MODE` names the mode",
        )
    if prof.modes[mode].replicas < 2 and not json_out:
        console(stderr=True).print(
            f"mode {mode} has 1 replica: upgrading restarts it (requests fail until it is back); "
            "a mode with 2+ replicas behind the router is upgraded one replica at a time"
        )
    run_up(mode, None, skip_preflight, timeout, profile, json_out, verb="upgrade", rolling=rolling)


def register(app: typer.Typer) -> None:
    app.command("upgrade")(upgrade_cmd)
