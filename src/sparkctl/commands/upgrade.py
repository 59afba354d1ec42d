"""`sparkctl upgrade`: the running mode onto the profile's current config, replica by replica."""

from __future__ import annotations

from sparkctl.commands._common import JsonOpt, ProfileOpt, console, handle_errors, load_profile
from sparkctl.commands.lifecycle import RollingOpt, SkipPreflightOpt, TimeoutOpt, run_up


def print_rolled(out, result, elapsed: float) -> None:  # RolledUp
    plan = result.plan
    done = [r for r in result.replicas if r.action == "rolled"]
    out.print(
        f"[green]rolled[/] {len(done)} of {len(result.replicas)} replica(s) onto mode {plan.mode} "
        f"(config {plan.config_hash}) in {elapsed:.1f}s, one at a time behind the router"
    )
    for r in result.replicas:
        was = f"{r.old['mode']} {r.old['config_hash']}" if r.old["config_hash"] else "nothing"
        if r.action == "skipped":
            out.print(f"  replica {r.index} ({'+'.join(r.nodes)}): already on {plan.config_hash}")
            continue
        out.print(
            f"  replica {r.index} ({'+'.join(r.nodes)}): {was} -> {r.new['mode']} {r.new['config_hash']}: "
            f"drained {r.in_flight} request(s) in {r.drain_s:.1f}s, stopped in {r.stop_s:.1f}s, "
            f"ready in {r.start_s:.1f}s"
        )


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
