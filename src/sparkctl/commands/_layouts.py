"""The layouts table `fit` and `plan --check` print when a mode does not split over its nodes."""

from __future__ import annotations

from sparkctl.commands._common import console


def render_layouts(plan, layouts, out=None) -> None:  # Plan, [LayoutOption], Console (lazy imports)
    """The layouts the same boxes can run instead (launch/layouts.py), the working ones first."""
    from rich.markup import escape
    from rich.table import Table

    t = Table(
        title=f"{plan.mode} does not split over its nodes; layouts of the same boxes", title_justify="left"
    )
    for col in ("layout", "works", "replicas: weights/rank, KV tokens, fit", "throughput shape"):
        t.add_column(col, overflow="fold")
    for o in layouts:
        reps = []
        for r in o.replicas:
            mem = (
                "memory unknown"
                if r.fits is None
                else (f"{r.weights_gib:g} GiB, {r.kv_tokens:,} tok, {'fits' if r.fits else 'does not fit'}")
            )
            reps.append(
                f"{r.replica.describe()}: {mem}" + "".join(f"\n  [red]{escape(e)}[/]" for e in r.errors)
            )
        if o.idle:
            reps.append(f"idle: {', '.join(o.idle)}")
        works = "[green]yes[/]" if o.works else "[red]no[/]"
        t.add_row(o.name, works, "\n".join(reps), escape(o.shape))
    out = out or console()
    out.print(t)
    for o in (o for o in layouts if o.works):
        entry = ", ".join(
            f"{k}: [{', '.join(v)}]" if isinstance(v, list) else f"{k}: {v}"
            for k, v in (o.mode or {}).items()
        )
        line = f"modes: {{{o.name}: {{{entry}}}}}" if entry else "needs unequal replicas (not one mode yet)"
        out.print(f"[bold]{o.name}[/]: {escape(line)}")
