"""`sparkctl persist install|status|remove [MODE]`: systemd units that bring the cluster back after
a reboot with no login (the controller's supervisor, each guarded node's memory guard)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated

import typer

from sparkctl.commands._common import (
    GuardOpt,
    ProfileOpt,
    add_group,
    console,
    handle_errors,
    load_profile,
)

ModeArg = Annotated[
    str | None, typer.Argument(metavar="MODE", help="Mode to bring back (default: running, last, default).")
]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print each unit's text; write nothing.")]
ControllerOpt = Annotated[
    str | None, typer.Option("--controller", help="Node that runs the supervisor (default: rank 0's).")
]
EnvFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--env-file", help="0600 file (NAME=value lines) with the profile's env: secrets, on the controller."
    ),
]
SparkctlOpt = Annotated[
    str | None, typer.Option("--python", help="The controller's python with sparkctl (default: this one).")
]
UnitDirOpt = Annotated[
    str, typer.Option("--unit-dir", hidden=True, help="Unit directory on the nodes (tests).")
]


@contextlib.contextmanager
def _session(profile, mode, controller=None, env_file=None, python=None, unit_dir="", guard=None):
    """What every verb starts from: (profile, open pool, Target, the mode's nodes)."""
    from sparkctl.connectors import NodePool
    from sparkctl.lifecycle.guard import with_guard

    prof = with_guard(load_profile(profile), guard)
    with NodePool(prof) as pool:
        target, nodes = _target(prof, pool, mode, controller, env_file, python, unit_dir, profile)
        yield prof, pool, target, nodes


def _target(prof, pool, mode, controller, env_file, python, unit_dir, profile):  # -> (Target, nodes)
    import os
    import sys

    from sparkctl.lifecycle.modes import resolve_mode
    from sparkctl.lifecycle.persist.install import Target
    from sparkctl.planning.build import build_plan
    from sparkctl.profile import find_profile

    mode = resolve_mode(prof, mode, pool=pool, fallback=("running", "last", "default"))
    plan = build_plan(prof, mode)
    nodes = list(dict.fromkeys([*(r.node for r in plan.ranks), *([plan.router.node] if plan.router else [])]))
    target = Target(
        mode=mode,
        controller=controller or plan.ranks[0].node,
        sparkctl=(python or sys.executable, "-m", "sparkctl"),
        profile_path=str(find_profile(profile).resolve()),
        env_file=str(env_file.expanduser().resolve()) if env_file else None,
        state_home=os.environ.get("XDG_STATE_HOME"),
        unit_dir=unit_dir,
    )
    return target, nodes


@handle_errors
def install_cmd(
    mode: ModeArg = None,
    dry_run: DryRunOpt = False,
    controller: ControllerOpt = None,
    env_file: EnvFileOpt = None,
    python: SparkctlOpt = None,
    guard: GuardOpt = None,
    unit_dir: UnitDirOpt = "/etc/systemd/system",
    profile: ProfileOpt = None,
) -> None:
    """Show, then write and enable, the units: `sparkctl supervise MODE` on the controller, the
    memory guard on each guarded node. Idempotent; they start at the next boot."""
    from sparkctl.lifecycle.persist.install import install

    with _session(profile, mode, controller, env_file, python, unit_dir, guard) as (
        prof,
        pool,
        target,
        nodes,
    ):
        report = install(prof, pool, target, nodes, dry_run=True)
        _show(report)
        if dry_run:
            console().print("dry run: nothing written")
            return
        report = install(prof, pool, target, nodes)
    _actions(report)
    console().print(
        f"persisted mode {target.mode}: the units start at boot (now: `systemctl start` them, "
        "after `sparkctl supervise --stop`)"
    )


@handle_errors
def status_cmd(
    mode: ModeArg = None,
    controller: ControllerOpt = None,
    env_file: EnvFileOpt = None,
    python: SparkctlOpt = None,
    guard: GuardOpt = None,
    unit_dir: UnitDirOpt = "/etc/systemd/system",
    profile: ProfileOpt = None,
) -> None:
    """Per node and unit: missing, current or stale (differs from what install writes), enabled,
    and active where systemd runs. Exit 1 when any is not current and enabled."""
    from sparkctl.lifecycle.persist.install import status

    with _session(profile, mode, controller, env_file, python, unit_dir, guard) as (
        prof,
        pool,
        target,
        nodes,
    ):
        report = status(prof, pool, target, nodes)
    _actions(report)
    if any(not state.startswith("current") or "not enabled" in state for _, _, state in report.actions):
        raise typer.Exit(1)


@handle_errors
def remove_cmd(
    mode: ModeArg = None,
    dry_run: DryRunOpt = False,
    controller: ControllerOpt = None,
    unit_dir: UnitDirOpt = "/etc/systemd/system",
    profile: ProfileOpt = None,
) -> None:
    """Stop, disable and delete every unit and file install wrote for this cluster."""
    from sparkctl.lifecycle.persist.install import remove

    with _session(profile, mode, controller, unit_dir=unit_dir) as (prof, pool, target, _):
        report = remove(prof, pool, target, [n.name for n in prof.nodes], dry_run=dry_run)
    if dry_run:
        for f in report.files:
            console().print(f"would remove {f.node}:{f.path}")
        return
    _actions(report)


def _show(report) -> None:  # lifecycle.persist.install.Report
    from rich.markup import escape

    out = console()
    for f in report.files:
        if f.path.endswith(".service"):
            out.print(f"[bold]{f.node}:{escape(f.path)}[/]")
            out.print(escape(f.text), soft_wrap=True)
        else:
            out.print(f"[bold]{f.node}:{escape(f.path)}[/] ({len(f.text)} bytes, mode {f.mode:o})")


def _actions(report) -> None:
    from rich.markup import escape

    out = console()
    for node, path, what in report.actions:
        out.print(f"{node}:{escape(path)}: {escape(what)}", soft_wrap=True)
    for note in report.notes:
        out.print(f"[yellow]{escape(note)}[/]")


def register(app: typer.Typer) -> None:
    help = "systemd units that bring the cluster back after a reboot, with no login."
    add_group(app, "persist", help, {"install": install_cmd, "status": status_cmd, "remove": remove_cmd})
