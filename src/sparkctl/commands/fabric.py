"""`sparkctl fabric-test`: prove the fabric carries NCCL (or gloo) traffic with the ranks' own env."""

from __future__ import annotations

from typing import Annotated

import typer

from sparkctl.commands._common import JsonOpt, ProfileOpt, console, handle_errors, load_service, print_json
from sparkctl.commands._findings import render_findings


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):g} {unit}"
    return f"{n} B"


def _render(report) -> None:
    from rich.table import Table

    out = console()
    for r in report.ranks:
        v = r.versions
        dev = (v.get("device") or {}).get("name", "cpu")
        out.print(
            f"rank {r.rank} on {r.node}: torch {v.get('torch', '?')}, NCCL {v.get('nccl', '-')}, "
            f"CUDA {v.get('cuda', '-')}, {dev} [{r.phase_reached}]"
        )
    if report.rows:
        table = Table(title=f"{report.backend} bus bandwidth (slowest rank)")
        for col in ("op", "size", "busbw GB/s", "algbw GB/s", "time us", "ok"):
            table.add_column(col, justify="left" if col == "op" else "right")
        for row in report.rows:
            table.add_row(
                row["op"],
                _size(row["bytes"]),
                f"{row['busbw_gbps']:.2f}",
                f"{row['algbw_gbps']:.2f}",
                f"{row['time_us']:.0f}",
                "yes" if row["correct"] else "[red]NO[/]",
            )
        out.print(table)
    render_findings(report.findings, detail_key="nccl")


def _render_links(per_link) -> None:
    """One line per cable: its judged bus bandwidth and verdict (the group's report follows)."""
    out = console()
    for label, r in per_link:
        bw = f"{r.judged_gbps:.2f} GB/s" if r.judged_gbps is not None else "no result"
        out.print(f"link {label}: all_gather {bw}: {r.severity.value}")


def register(app: typer.Typer) -> None:
    @app.command("fabric-test")
    @handle_errors
    def fabric_test_cmd(
        mode: Annotated[
            str | None,
            typer.Argument(
                metavar="MODE", help="Mode whose ranks to test (default: the profile's default mode)."
            ),
        ] = None,
        profile: ProfileOpt = None,
        mode_opt: Annotated[str | None, typer.Option("--mode", "-m", hidden=True)] = None,
        backend: Annotated[
            str, typer.Option(help="nccl (GPUs) or gloo (CPU; reported, not judged).")
        ] = "nccl",
        sizes: Annotated[str | None, typer.Option(help="Message sizes, e.g. 1M,16M,128M,1G.")] = None,
        iters: Annotated[int, typer.Option(min=1, help="Timed iterations per size.")] = 20,
        timeout: Annotated[
            float, typer.Option(min=5, help="Seconds before a silent rank counts as hung.")
        ] = 120.0,
        threshold: Annotated[
            float | None,
            typer.Option(help="Pass mark for all_gather bus bandwidth in GB/s (default 21.875)."),
        ] = None,
        keep: Annotated[bool, typer.Option(help="Keep the rank containers for inspection.")] = False,
        links: Annotated[
            bool, typer.Option(help="First test every cable of the group's layout pair by pair (ring, mesh).")
        ] = False,
        sysfs_root: Annotated[str, typer.Option(hidden=True)] = "/sys",
        json_out: JsonOpt = False,
    ) -> None:
        """Run all-reduce and all-gather between the mode's ranks, in the serving image, with the
        exact NCCL/GLOO environment `up` gives them; report bus bandwidth and a verdict."""
        from sparkctl.connectors import NodePool
        from sparkctl.errors import ExitCode
        from sparkctl.gpu.fabric import plans_to_test, run_fabric_test
        from sparkctl.planning.build import build_plan

        prof, mode = load_service(profile, mode or mode_opt)
        plan = build_plan(prof, mode)  # --mode kept for old scripts; MODE is positional
        if threshold is None:
            threshold = prof.fabric.min_busbw_gbps
        reports, per_link = [], []

        def run(sub, conns):
            return run_fabric_test(
                sub,
                conns,
                backend=backend,
                sizes=sizes,
                iters=iters,
                timeout_s=timeout,
                threshold_gbps=threshold,
                keep=keep,
            )

        with NodePool(prof) as pool:
            for sub in plans_to_test(plan):  # each replica's own ranks (one plan without replicas)
                if links:
                    from sparkctl.gpu.links import run_links

                    per_link += run_links(pool, prof, sub, run, sysfs_root)
                reports.append(run(sub, {n: pool.get(n) for n in dict.fromkeys(sub.nodes)}))
        if json_out:
            whole = reports[0].to_json() if len(reports) == 1 else [r.to_json() for r in reports]
            links_json = [{"link": label, **r.to_json()} for label, r in per_link]
            print_json({"links": links_json, "group": whole} if links else whole)
        else:
            _render_links(per_link)
            for report in reports:
                _render(report)
        if any(r.severity.value == "error" for r in [*reports, *(r for _, r in per_link)]):
            raise typer.Exit(ExitCode.CHECK_FAILED)
