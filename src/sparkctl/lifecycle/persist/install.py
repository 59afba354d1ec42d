"""`sparkctl persist install|status|remove`: the controller's supervisor unit and, on every node
the profile guards, the memory guard's unit, written over the profile's SSH connections.

`desired` says what each node should hold (pure, from the profile and what each node answered);
`install` writes what differs (idempotent), links each unit into multi-user.target.wants (what
`systemctl enable` does) and reloads systemd where it runs; `remove` takes every one of those
paths away; `status` compares the nodes with `desired`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sparkctl.errors import UsageError
from sparkctl.fanout import fan_out
from sparkctl.lifecycle import guard
from sparkctl.lifecycle.persist import nodeops
from sparkctl.lifecycle.persist.nodeops import Who
from sparkctl.lifecycle.persist.units import (
    GUARD_DIR,
    UNIT_DIR,
    WANTED_BY,
    UnitFile,
    guard_config_text,
    guard_unit,
    guard_unit_name,
    supervisor_unit,
    supervisor_unit_name,
)

if TYPE_CHECKING:
    from sparkctl.connectors import NodePool
    from sparkctl.profile import Profile


@dataclass(frozen=True)
class Target:
    """What to install: the mode, where the supervisor runs and how it is started there."""

    mode: str
    controller: str
    sparkctl: tuple[str, ...]  # argv of sparkctl on the controller (python3 -m sparkctl)
    profile_path: str  # absolute, on the controller
    env_file: str | None = None
    state_home: str | None = None
    unit_dir: str = UNIT_DIR


@dataclass
class Report:
    files: list[UnitFile]
    actions: list[tuple[str, str, str]] = field(default_factory=list)  # (node, path, what happened)
    notes: list[str] = field(default_factory=list)


def env_secret_names(profile: Profile) -> list[str]:
    eng = profile.engine
    sources = [*eng.secrets.values(), eng.api_key, eng.admin_api_key]
    return sorted({s.env for s in sources if s is not None and s.env})


def desired(profile: Profile, target: Target, nodes: list[str], whos: dict[str, Who]) -> list[UnitFile]:
    ctl = whos[target.controller]
    unit = supervisor_unit(
        profile.cluster,
        target.mode,
        ctl.user,
        list(target.sparkctl),
        target.profile_path,
        target.env_file,
        target.state_home,
    )
    files = [
        UnitFile(
            target.controller, f"{target.unit_dir}/{supervisor_unit_name(profile.cluster)}", unit, enable=True
        )
    ]
    config = guard_config_text(guard.node_config(profile))
    for node in guard.guarded_nodes(profile, nodes):
        w = whos[node]
        program, conf = guard_files(w.home, profile.cluster)
        text = guard_unit(profile.cluster, w.user, "/usr/bin/python3", program, conf, guard.digest())
        files += [
            UnitFile(node, program, guard.program(), mode=0o600),
            UnitFile(node, conf, config, mode=0o600),
            UnitFile(node, f"{target.unit_dir}/{guard_unit_name(profile.cluster)}", text, enable=True),
        ]
    return files


def guard_files(home: str, cluster: str) -> tuple[str, str]:
    """The guard's program (`persist-memguard-<digest>.py`: the bytes `up` sends its guard, checked by digest at each start) and the unit's config."""
    return (
        f"{home}/{GUARD_DIR}/persist-memguard-{guard.digest()}.py",
        f"{home}/{GUARD_DIR}/persist-{cluster}.json",
    )


def wants_link(f: UnitFile, unit_dir: str) -> str:
    return f"{unit_dir}/{WANTED_BY}.wants/{f.name}"


def node_users(pool: NodePool, nodes: list[str]) -> dict[str, Who]:
    return fan_out(nodes, lambda n: nodeops.who(pool.get(n))).values_or_raise()


def check_controller(profile: Profile, pool: NodePool, target: Target, w: Who) -> None:
    """The controller can run the unit: sparkctl and the profile are there, the env file is fit."""
    conn = pool.get(target.controller)
    for path, what, test in (
        (target.sparkctl[0], "sparkctl's python", "-x"),
        (target.profile_path, "the profile", "-r"),
    ):
        if not conn.run(["test", test, path], timeout=nodeops.TIMEOUT).ok:
            raise UsageError(
                f"{what} {path} is not on {target.controller}, where the supervisor's unit runs",
                node=target.controller,
                fix="run `sparkctl persist install` on the controller (rank 0's node), or --controller NODE",
            )
    names = env_secret_names(profile)
    if names and not target.env_file:
        raise UsageError(
            f"the profile reads {', '.join(names)} from the environment; a unit has no login shell",
            fix=f"put {', '.join(n + '=...' for n in names)} in a 0600 file and pass --env-file PATH",
        )
    if target.env_file:
        problem = nodeops.env_file_problem(conn, w, target.env_file, names)
        if problem:
            raise UsageError(
                problem, node=target.controller, fix=f"chmod 600 {target.env_file}, one NAME=value a line"
            )


def install(
    profile: Profile, pool: NodePool, target: Target, nodes: list[str], dry_run: bool = False
) -> Report:
    whos = node_users(pool, list(dict.fromkeys([target.controller, *nodes])))
    check_controller(profile, pool, target, whos[target.controller])
    report = Report(desired(profile, target, nodes, whos))
    if dry_run:
        return report
    for f in report.files:
        conn, w = pool.get(f.node), whos[f.node]
        report.actions.append((f.node, f.path, nodeops.write(conn, w, f.path, f.text, f.mode)))
        if f.enable:
            link = wants_link(f, target.unit_dir)
            report.actions.append((f.node, link, nodeops.link(conn, w, f.path, link)))
    _reload(pool, report, whos, target)
    return report


def remove(
    profile: Profile, pool: NodePool, target: Target, nodes: list[str], dry_run: bool = False
) -> Report:
    """Every path install writes for this cluster, on every node of the profile (a node the mode
    no longer uses may still hold its guard unit)."""
    whos = node_users(pool, list(dict.fromkeys([target.controller, *nodes])))
    files = desired(profile, target, nodes, whos)
    for node in nodes:  # the guard's files whether or not the profile guards the node now
        if not any(f.node == node and f.enable and "memguard" in f.name for f in files):
            name = f"{target.unit_dir}/{guard_unit_name(profile.cluster)}"
            files += [UnitFile(node, p, "") for p in guard_files(whos[node].home, profile.cluster)]
            files += [UnitFile(node, name, "", enable=True)]
    report = Report(files)
    if dry_run:
        return report
    for f in files:
        conn, w = pool.get(f.node), whos[f.node]
        if f.enable and w.systemd and target.unit_dir == UNIT_DIR:
            nodeops.systemctl(conn, w, "disable", "--now", f.name)
        paths = [wants_link(f, target.unit_dir), f.path] if f.enable else [f.path]
        report.actions += [(f.node, p, nodeops.remove(conn, w, p)) for p in paths]
    for node in dict.fromkeys(f.node for f in files):  # the directory install made, when now empty
        nodeops.prune(pool.get(node), whos[node], [f"{target.unit_dir}/{WANTED_BY}.wants"])
    _reload(pool, report, whos, target)
    return report


def status(profile: Profile, pool: NodePool, target: Target, nodes: list[str]) -> Report:
    whos = node_users(pool, list(dict.fromkeys([target.controller, *nodes])))
    report = Report(desired(profile, target, nodes, whos))
    for f in report.files:
        conn, w = pool.get(f.node), whos[f.node]
        kind, content = nodeops.read(conn, f.path)
        state = "missing" if kind == "missing" else "current" if content == f.text else "stale"
        if f.enable:
            lkind, ltarget = nodeops.read(conn, wants_link(f, target.unit_dir))
            state += ", enabled" if lkind == "link" and ltarget == f.path else ", not enabled"
            if w.systemd and target.unit_dir == UNIT_DIR:
                state += f", {nodeops.systemctl(conn, w, 'is-active', f.name)}"
        report.actions.append((f.node, f.path, state))
    return report


def _reload(pool: NodePool, report: Report, whos: dict[str, Who], target: Target) -> None:
    for node in sorted({f.node for f in report.files if f.enable}):
        w = whos[node]
        if target.unit_dir != UNIT_DIR:
            continue
        if w.systemd:
            nodeops.systemctl(pool.get(node), w, "daemon-reload")
        else:
            report.notes.append(
                f"{node}: systemd is not the init here; the units start when it boots with systemd"
            )
