"""`sparkctl profile check`: validate a profile without touching any node."""

from __future__ import annotations

import typer

from sparkctl.commands._common import (
    JsonOpt,
    ProfileOpt,
    console,
    group_profile,
    handle_errors,
    load_profile,
    print_json,
    print_wrapped,
)

profile_app = typer.Typer(
    help="Inspect and validate cluster profiles.", no_args_is_help=True, callback=group_profile
)


@profile_app.command("check")
@handle_errors
def check_cmd(profile: ProfileOpt = None, json_out: JsonOpt = False) -> None:
    """Validate the whole profile (schema, cross-references, TP vs GPUs); touches no node."""
    prof = load_profile(profile)
    from sparkctl.planning.build import build_plan

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


def register(app: typer.Typer) -> None:
    app.add_typer(profile_app, name="profile")
