"""`sparkctl profile check`: validate a profile without touching any node."""

from __future__ import annotations

import typer

from sparkctl.commands._common import (
    JsonOpt,
    ProfileOpt,
    add_group,
    console,
    handle_errors,
    load_profile,
    print_json,
    print_wrapped,
)


@handle_errors
def check_cmd(profile: ProfileOpt = None, json_out: JsonOpt = False) -> None:
    """Validate the whole profile (schema, cross-references, TP vs GPUs); touches no node."""
    prof = load_profile(profile, fleet=True)
    from sparkctl.planning.build import build_plan

    if prof.models:
        _check_fleet(prof, json_out)
        return
    plans = {name: build_plan(prof, name) for name in prof.modes}
    # what `plan` warns about (a GB10 without gpu:, an unpinned revision), once for all modes
    warnings = list(dict.fromkeys(w for p in plans.values() for w in p.warnings))
    if json_out:
        print_json(
            {
                "ok": True,
                "cluster": prof.cluster,
                "nodes": [n.name for n in prof.nodes],
                "modes": {
                    m: {
                        "nodes": p.nodes,
                        "tp": p.tp,
                        "pp": p.pp,
                        "replicas": p.replicas,
                        "shape": p.shape,
                        "config_hash": p.config_hash,
                    }
                    for m, p in plans.items()
                },
                "warnings": warnings,
            }
        )
        return
    out = console()
    out.print(
        f"[green]ok[/] profile for cluster [bold]{prof.cluster}[/]: "
        f"{len(prof.nodes)} node(s), modes: " + ", ".join(f"{m} ({p.shape})" for m, p in plans.items())
    )
    for w in warnings:
        print_wrapped(out, "[yellow]warning:[/] ", 9, w, 9)


def _check_fleet(prof, json_out: bool) -> None:
    """A fleet: every mode of every service planned, and the services in their default modes
    within each node's memory (else the refusal, exit 2, with a fix)."""
    from sparkctl.planning.build import build_plan
    from sparkctl.planning.fleet import plan_fleet
    from sparkctl.profile.fleet import service_profile

    views = {name: service_profile(prof, name) for name in prof.models}
    plans = {name: {m: build_plan(v, m) for m in v.modes} for name, v in views.items()}
    fleet = plan_fleet(prof)
    if json_out:
        print_json(
            {
                "ok": True,
                "cluster": prof.cluster,
                "nodes": [n.name for n in prof.nodes],
                "fleet": True,
                "services": {
                    name: {
                        "engine": views[name].engine.kind,
                        "port": views[name].engine.port,
                        "default_mode": views[name].default_mode(),
                        "modes": {m: {"nodes": p.nodes, "shape": p.shape} for m, p in ps.items()},
                    }
                    for name, ps in plans.items()
                },
                "memory": [n.to_json() for n in fleet.nodes],
            }
        )
        return
    out = console()
    services = "; ".join(
        f"{name} ({views[name].engine.kind}, port {views[name].engine.port}: "
        + ", ".join(f"{m} ({p.shape})" for m, p in ps.items())
        + ")"
        for name, ps in plans.items()
    )
    out.print(
        f"[green]ok[/] profile for cluster [bold]{prof.cluster}[/]: {len(prof.nodes)} node(s), "
        f"a fleet of {len(plans)} services: {services}"
    )
    for n in fleet.nodes:
        out.print(f"memory on {n.node}: {n.sum_line()}")


def register(app: typer.Typer) -> None:
    add_group(app, "profile", "Inspect and validate cluster profiles.", {"check": check_cmd})
