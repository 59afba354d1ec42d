"""`sparkctl image build|verify RECIPE`: derivative serving images from a pinned base (docs/images.md)."""

from __future__ import annotations

from typing import Annotated

import typer

from sparkctl.commands._common import (
    JsonOpt,
    ProfileOpt,
    add_group,
    console,
    handle_errors,
    load_profile,
    print_json,
)

RecipeArg = Annotated[
    str, typer.Argument(metavar="RECIPE", help="Recipe name (under images/) or recipe directory.")
]
TagOpt = Annotated[
    str | None, typer.Option("--tag", metavar="TAG", help="Image tag (default: sparkctl/<recipe>:latest).")
]
NodeOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--node", metavar="NODE", help="Node to act on (repeatable; default: every node of the profile)."
    ),
]


def _load(recipe: str):  # LoadedRecipe, imported lazily
    from sparkctl.recipes import find_recipe, load_recipe

    return load_recipe(find_recipe(recipe))


def _on_nodes(profile, nodes: list[str] | None, fn):  # Path, Callable -> fanout.Results
    """fn(connector) on the named nodes (default: all of the profile's), in parallel: one Outcome per node."""
    from sparkctl.connectors import NodePool
    from sparkctl.errors import UsageError

    prof = load_profile(profile, fleet=True)  # the nodes only
    names = [n.name for n in prof.nodes]
    for n in nodes or []:
        if n not in names:
            raise UsageError(f"unknown node '{n}'", fix=f"nodes of this profile: {', '.join(names)}")
    with NodePool(prof) as pool:
        return pool.map(list(dict.fromkeys(nodes)) if nodes else names, fn)


@handle_errors
def build_cmd(
    recipe: RecipeArg,
    tag: TagOpt = None,
    node: NodeOpt = None,
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Check the recipe (manifest, pinned base, patches) and build its derivative on each node."""
    from sparkctl.recipes.build import build as build_on
    from sparkctl.recipes.schema import check_manifest

    loaded = _load(recipe)
    check_manifest(loaded)  # before any connection: a tampered overlay never reaches a node
    results = _on_nodes(profile, node, lambda conn: build_on(conn.docker(), loaded, conn.node, tag))
    if json_out:
        print_json({n: o.value.to_json() if o.ok else {"error": str(o.error)} for n, o in results.items()})
    else:
        out = console()
        for n, o in results.items():
            if not o.ok:
                out.print(f"[red]failed[/] on {n}: {getattr(o.error, 'message', None) or o.error}")
                continue
            r = o.value
            out.print(
                f"[green]built[/] [bold]{r.tag}[/] on {n}: {r.image_id[:19]}  base {r.base_id[:19]}  "
                f"+{r.added_layers} layer ({r.added_bytes:,} bytes)  recipe {r.recipe_hash[:12]}"
            )
    results.values_or_raise()  # exit non-zero with the first failure (every node's outcome printed above)


@handle_errors
def verify_cmd(
    recipe: RecipeArg,
    tag: TagOpt = None,
    node: NodeOpt = None,
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Re-check an existing derivative's overlaid files, recipe hash and base on each node."""
    from sparkctl.findings import Finding, Severity, worst
    from sparkctl.recipes.verify import verify_image

    loaded = _load(recipe)
    results = _on_nodes(
        profile, node, lambda conn: verify_image(conn.docker(), loaded, tag or loaded.tag, conn.node)
    )
    findings: list[Finding] = [f for r in results.values_or_raise().values() for f in r]
    if json_out:
        print_json({"recipe": loaded.name, "findings": [f.to_json() for f in findings]})
    else:
        from sparkctl.commands._findings import render_findings

        render_findings(findings)
    if worst(findings) == Severity.ERROR:
        from sparkctl.errors import ExitCode

        raise typer.Exit(ExitCode.CHECK_FAILED)


def register(app: typer.Typer) -> None:
    help = "Image recipes: build a derivative serving image from a pinned base, verify it."
    add_group(app, "image", help, {"build": build_cmd, "verify": verify_cmd})
