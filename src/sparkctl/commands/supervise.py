"""`sparkctl supervise`: restart a mode's replica groups together when a rank dies (foreground or detached)."""

from __future__ import annotations

from typing import Annotated

import typer

from sparkctl.commands._common import GuardOpt, ProfileOpt, console, handle_errors, load_profile, load_service

MaxRestartsOpt = Annotated[
    int, typer.Option("--max-restarts", min=0, help="Group restarts allowed within an hour; then give up.")
]
CanaryEveryOpt = Annotated[
    float, typer.Option("--canary-every", min=0, help="Seconds between generation canaries (0: none).")
]
CanaryFailuresOpt = Annotated[
    int, typer.Option("--canary-failures", min=1, help="Failed canaries in a row that restart the group.")
]
BackoffOpt = Annotated[
    float, typer.Option("--backoff", min=0, help="Seconds before the 2nd restart, doubling after (max 60).")
]


@handle_errors
def supervise_cmd(
    mode: Annotated[
        str | None, typer.Argument(metavar="MODE", help="Mode to supervise (default: the running one).")
    ] = None,
    detach: Annotated[bool, typer.Option("--detach", "-d", help="Run in the background, detached.")] = False,
    stop: Annotated[bool, typer.Option("--stop", help="Stop the running supervisor.")] = False,
    max_restarts: MaxRestartsOpt = 5,
    canary_every: CanaryEveryOpt = 10.0,
    canary_failures: CanaryFailuresOpt = 3,
    backoff: BackoffOpt = 2.0,
    guard: GuardOpt = None,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait", help="Nothing to supervise yet (nodes unreachable, nothing runs): wait, saying so."
        ),
    ] = False,
    profile: ProfileOpt = None,
) -> None:
    """Watch the running group; when a rank exits or the generation canary keeps failing, restart
    every rank together (backoff, restart limit). `status` and `logs` show each restart and why.
    The memory guard runs on the guarded nodes meanwhile (docs/memory.md)."""
    from sparkctl.lifecycle.guard import with_guard
    from sparkctl.lifecycle.supervisor import process as supervisor
    from sparkctl.lifecycle.supervisor.process import Policy

    prof = with_guard(load_profile(profile, fleet=True), guard)
    if prof.models and not mode:
        from sparkctl.commands.fleet import supervise_fleet

        supervise_fleet(profile, prof, detach, stop)
        return
    if prof.models:
        prof, mode = load_service(profile, mode)
        prof = with_guard(prof, guard)
    if stop:
        console().print(supervisor.stop(prof.cluster) or f"no supervisor runs for cluster {prof.cluster}")
        return
    from sparkctl.lifecycle.modes import resolve_mode

    mode = resolve_mode(
        prof,
        mode,
        fallback=("running",),
        missing=("no mode is running to supervise", "name the MODE, or `sparkctl up --supervise`"),
    )
    policy = Policy(
        max_restarts=max_restarts,
        backoff=backoff,
        canary_every=canary_every,
        canary_failures=canary_failures,
        guard=guard,
        wait=wait,
    )
    if detach:
        info = start_detached(profile, prof, mode, policy)
        console().print(f"supervising mode {mode} in the background (pid {info.get('pid')})")
        return
    from sparkctl.connectors import NodePool
    from sparkctl.lifecycle.supervisor.process import StopFlag
    from sparkctl.lifecycle.supervisor.supervise import run

    flag = StopFlag().install()
    with NodePool(prof) as pool:
        code = run(prof, pool, mode, policy, flag, say=lambda line: console().print(line, markup=False))
    raise typer.Exit(code)


def start_detached(profile_opt, prof, mode: str, policy, service: str | None = None) -> dict:
    """Spawn the background supervisor for `mode` (an already running one for it is kept); a
    fleet's `service`: its SERVICE:MODE."""
    from sparkctl.lifecycle.supervisor import process as supervisor
    from sparkctl.profile import find_profile

    current = supervisor.running(prof.cluster)
    if current and current.get("mode") == mode:
        return current
    supervisor.stop(prof.cluster)
    path = find_profile(profile_opt).resolve()
    return supervisor.spawn(path, prof.cluster, mode, policy, f"{service}:{mode}" if service else None)


def register(app: typer.Typer) -> None:
    app.command("supervise")(supervise_cmd)
