"""`sparkctl init`: discover the nodes and write a working, commented profile (docs/init.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sparkctl.commands._common import console, handle_errors

if TYPE_CHECKING:
    from rich.status import Status

    from sparkctl.discover import Draft, FabricOption, NodeDiscovery


@handle_errors
def init_cmd(
    peer: Annotated[
        list[str] | None,
        typer.Option("--peer", metavar="[USER@]HOST[:PORT]", help="A peer over SSH; this machine is rank 0."),
    ] = None,
    node: Annotated[
        list[str] | None,
        typer.Option(
            "--node",
            metavar="[USER@]HOST[:PORT]",
            help="Every node over SSH, the first is rank 0 ('local' = this machine); instead of --peer, "
            "to run init from a machine that does not serve.",
        ),
    ] = None,
    non_interactive: Annotated[
        bool, typer.Option("--non-interactive", help="Ask nothing: answers come from flags.")
    ] = False,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", help="Profile to write (default: sparkctl.yaml; stdout with --from-command)."
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing profile.")] = False,
    model: Annotated[str | None, typer.Option(metavar="ORG/NAME[@REV]", help="Target model (HF id).")] = None,
    draft: Annotated[
        str | None, typer.Option(metavar="ORG/NAME[@REV]", help="DFlash draft model ('none': no draft).")
    ] = None,
    image: Annotated[str | None, typer.Option(metavar="REF", help="Serving image on the nodes.")] = None,
    cluster: Annotated[str | None, typer.Option(help="Cluster name (default: from the node names).")] = None,
    hf_cache: Annotated[
        str | None, typer.Option(metavar="PATH", help="HF cache on the nodes (default: where the model is).")
    ] = None,
    fabric: Annotated[
        str | None,
        typer.Option(metavar="NETDEV|CIDR", help="Use this shared network for NCCL instead of the best one."),
    ] = None,
    ssh_user: Annotated[str | None, typer.Option(help="SSH user for the nodes.")] = None,
    ssh_key: Annotated[
        str | None, typer.Option(help="SSH private key (default: agent/default keys).")
    ] = None,
    known_hosts: Annotated[
        str, typer.Option(help="known_hosts file SSH host keys are checked against.")
    ] = "~/.ssh/known_hosts",
    accept_new_host_keys: Annotated[
        bool,
        typer.Option(
            "--accept-new-host-keys",
            help="Trust and record unknown SSH host keys (changed ones are refused).",
        ),
    ] = False,
    ssh_setup: Annotated[
        bool,
        typer.Option(
            "--ssh-setup",
            help="Set up passwordless SSH to the peers (confirm host key, create a key, install it "
            "with a password typed once), then stop.",
        ),
    ] = False,
    from_command: Annotated[
        str | None,
        typer.Option(
            "--from-command",
            metavar="LINE",
            help="The launch command you run today (quoted; a `docker run ... IMAGE` part included): "
            "its image, model, flags and layout become the profile, then `fit` judges it.",
        ),
    ] = None,
    gpu: Annotated[
        str | None,
        typer.Option(
            metavar="NAME,GIB,CC[,unified]",
            help="With --from-command: every node's GPU (default: this machine's, from nvidia-smi).",
        ),
    ] = None,
    probe: Annotated[
        bool,
        typer.Option(
            help="With --from-command: ask this machine's nvidia-smi and let `fit` reach the nodes."
        ),
    ] = True,
    connect_timeout: Annotated[float, typer.Option(hidden=True)] = 10.0,
    sysfs_root: Annotated[str, typer.Option(hidden=True, help="sysfs root on every node (tests).")] = "/sys",
) -> None:
    """Discover this machine and the peers (netdevs, RoCE, GPUs, Docker, serving images, HF caches),
    pick the shared fabric, propose modes, ask for the model and image, and write a profile."""
    from sparkctl.discover.workflow import InitRequest, parse_targets, run_init
    from sparkctl.errors import UsageError

    targets = parse_targets(node, peer)
    if from_command is not None:
        from sparkctl.discover.from_command import FromCommandRequest

        given = [f for f, v in (("--model", model), ("--draft", draft), ("--hf-cache", hf_cache),
                                ("--fabric", fabric), ("--ssh-setup", ssh_setup)) if v]  # fmt: skip
        if given:
            raise UsageError(
                f"--from-command takes the model, its cache and the layout from the line; {given[0]} is init's "
                "discovery's",
                fix=f"drop {given[0]}, or put it in the line (e.g. --model-path ORG/NAME)",
            )

        spec, count = _gpu_spec(gpu) if gpu else _local_gpu() if probe else (None, None)
        req = FromCommandRequest(from_command, targets, image, cluster, spec, count)
        _from_command(req, output, force, probe)
        return
    output = output or Path("sparkctl.yaml")
    if ssh_setup:
        from sparkctl.discover.sshsetup import setup_peers

        if non_interactive:
            raise UsageError("--ssh-setup asks for a password; run it without --non-interactive")
        setup_peers(
            [t for t in targets if t[0] != "local"],
            ssh_user=ssh_user,
            ssh_key=ssh_key,
            known_hosts=known_hosts,
            timeout=connect_timeout,
            prompt=lambda text, hide: typer.prompt(text, hide_input=hide),
            confirm=lambda text: typer.confirm(text, default=False),
        )
        return
    req = InitRequest(
        targets,
        non_interactive=non_interactive,
        model=model,
        draft=draft,
        image=image,
        cluster=cluster,
        hf_cache=hf_cache,
        fabric=fabric,
        ssh_user=ssh_user,
        ssh_key=ssh_key,
        known_hosts=known_hosts,
        accept_new=accept_new_host_keys,
        timeout=connect_timeout,
        sysfs_root=sysfs_root,
    )
    try:
        text = run_init(req, _CliUi(), output)
    except typer.Abort:  # a question met the end of stdin (no terminal) or Ctrl-D
        raise UsageError(
            "init asks questions and got no answer (stdin is not a terminal or was closed)",
            fix="run it in a terminal, or pass --non-interactive --model ORG/NAME --image REF "
            "(and --draft ORG/NAME or none)",
        ) from None
    _write(output, text, force, non_interactive)


def _gpu_spec(text: str) -> tuple[dict, None]:
    from sparkctl.errors import UsageError

    parts = [p.strip() for p in text.split(",")]
    try:
        if len(parts) not in (3, 4) or (len(parts) == 4 and parts[3] != "unified"):
            raise ValueError
        spec = {"name": parts[0], "memory_gib": float(parts[1]), "compute_capability": parts[2]}
    except ValueError:
        raise UsageError(
            f"--gpu {text!r}: not NAME,GIB,CC[,unified]", fix="e.g. --gpu 'NVIDIA GeForce RTX 3090,24,8.6'"
        ) from None
    return spec | ({"unified_memory": True} if len(parts) == 4 else {}), None


def _local_gpu() -> tuple[dict | None, int | None]:
    """This machine's GPUs (nvidia-smi through the local connector), as init's discovery reads them."""
    from sparkctl.connectors.local import LocalConnector
    from sparkctl.errors import SparkctlError
    from sparkctl.facts.gpu import gpus_probe, meminfo_probe

    conn = LocalConnector("local")
    try:
        report = gpus_probe().run(conn)
    except (
        SparkctlError,
        ValueError,
    ):  # a failing or unreadable nvidia-smi: no GPU facts, as init's discovery
        return None, None
    if report is None or not report.gpus or not report.gpus[0].compute_cap:
        return None, None
    g = report.gpus[0]
    mib = g.memory_total_mib or 0
    if report.unified_memory:
        try:
            mib = meminfo_probe().run(conn).get("MemTotal", 0) / 1024
        except SparkctlError:
            mib = 0
    spec = {"name": g.name, "memory_gib": round(mib / 1024, 1), "compute_capability": g.compute_cap}
    spec |= {"unified_memory": True} if report.unified_memory else {}
    return (spec if mib > 0 else None), len(report.gpus)


def _from_command(req, output: Path | None, force: bool, probe: bool) -> None:  # FromCommandRequest
    """Write the profile (stdout, or -o without overwriting), name what was not taken, then `fit`
    it where every node is known, else the next steps."""
    from rich.markup import escape

    from sparkctl.commands._findings import render_findings
    from sparkctl.discover.from_command import from_command
    from sparkctl.errors import ExitCode, UsageError
    from sparkctl.findings import Severity

    result = from_command(req)
    err = console(stderr=True)
    if output is None:
        typer.echo(result.text, nl=False)
    elif output.exists() and not force and output.read_text() != result.text:
        raise UsageError(
            f"{output} exists; not overwritten", fix="rerun with --force to overwrite, or -o OTHER.yaml"
        )
    else:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(result.text)
        err.print(f"[green]wrote {escape(str(output))}[/] (mode {escape(result.mode)})")
    render_findings(result.findings, out=err)
    where = f" -p {output}" if output else " -p FILE"
    failed = any(f.severity == Severity.ERROR for f in result.findings)
    if not result.unknown_nodes and _fit(result, probe and not result.placeholders, err):
        failed = True
    if result.placeholders:
        err.print("[bold]next:[/] check or fill in " + escape(", ".join(result.placeholders)))
        err.print(escape(f"then: sparkctl profile check{where} && sparkctl fit{where} {result.mode}"))
    if failed:
        raise typer.Exit(ExitCode.CHECK_FAILED)


def _fit(result, probe: bool, err) -> bool:  # FromCommand, Console: True when fit finds an error
    from sparkctl.commands.fit import render
    from sparkctl.engines import get_engine
    from sparkctl.engines.support.launch_check import LaunchRequest
    from sparkctl.findings import Severity
    from sparkctl.planning.build import build_plan

    launch = get_engine(result.profile.engine.kind).launch
    if launch is None:  # nothing to check the line's flags with: the profile stands as written
        return False
    plan = build_plan(result.profile, result.mode)
    request = LaunchRequest(
        reach=probe,
        require_models=False,
        progress=lambda msg: err.print(f"[dim]{msg}...[/]"),
        build=build_plan,
    )
    err.print(f"[bold]fit {result.mode}:[/]")
    check = launch.launch_check(plan, result.profile, request)
    render(plan, check, err)
    return any(f.severity == Severity.ERROR for f in check.findings)


class _CliUi:
    """The init workflow's questions and tables, on the terminal."""

    def status(self, text: str) -> Status:
        return console().status(text)

    def ask(self, prompt: str, default: str | None) -> str:
        return typer.prompt(prompt, default=default) if default else typer.prompt(prompt)

    def show_discovery(self, nodes: list[NodeDiscovery], fab: FabricOption | None) -> None:
        show_discovery(nodes, fab)

    def show_proposal(self, draft: Draft) -> None:
        show_proposal(draft)


def _write(path: Path, text: str, force: bool, non_interactive: bool) -> None:
    from sparkctl.errors import UsageError

    out = console()
    if path.exists() and not force:
        old = path.read_text()
        if old == text:
            out.print(f"[green]{path} is already up to date[/]")
            return
        import difflib

        from rich.text import Text

        styles = {"+": "green", "-": "red", "@": "cyan"}
        for line in difflib.unified_diff(old.splitlines(), text.splitlines(), str(path), "init", lineterm=""):
            out.print(Text(line, style=styles.get(line[:1], "")), soft_wrap=True)
        raise UsageError(
            f"{path} exists; not overwritten (the diff above is what init would change)",
            fix="rerun with --force to overwrite, or -o OTHER.yaml",
        )
    if not non_interactive and not typer.confirm(f"Write {path}?", default=True):
        raise typer.Exit(1)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    out.print(f"[green]wrote {path}[/]  next: `sparkctl preflight -p {path} MODE`")


def show_discovery(nodes, fab) -> None:  # NodeDiscovery list, FabricOption (lazy imports)
    from rich.markup import escape
    from rich.table import Table

    out = console()
    table = Table(title="discovered")
    for col in ("node", "reached as", "GPUs", "Docker", "RoCE", "engine images", "models in HF cache"):
        table.add_column(col, overflow="fold")
    for n in nodes:
        gpus = ", ".join(sorted({g.name for g in n.gpus.gpus})) if n.gpus else ""
        gpus = f"{n.gpu_count} x {gpus}" if n.gpu_count else "[yellow]none[/]"
        if n.docker is None:
            dock = "[red]unreachable[/]"
        else:
            dock = f"{n.docker.version}" + (", nvidia" if n.nvidia_runtime else ", [yellow]no nvidia[/]")
        roce = ", ".join(sorted(d for d, dev in n.rdma.items() if dev.active)) or "-"
        images = "\n".join(escape(i.ref) for i in n.images) or "-"
        models = "\n".join(escape(m) for m in sorted(n.models())) or "-"
        table.add_row(escape(n.name), escape(n.description), gpus, dock, escape(roce), images, models)
    out.print(table)
    if fab is not None:
        ends = ", ".join(
            f"{e.node} {e.netdev} {e.ip}" + (f" [{'/'.join(e.hcas)}]" if e.hcas else "") for e in fab.ends
        )
        out.print(f"[bold]fabric[/] {escape(fab.describe())}: {escape(ends)}")


def show_proposal(draft) -> None:  # sparkctl.discover.Draft
    from rich.markup import escape

    out = console()
    for m in draft.modes:
        star = " [green](default)[/]" if m.default else ""
        out.print(
            f"[bold]mode[/] {escape(m.name)}{star}: {', '.join(m.nodes)} tp={m.tp}{f' replicas={m.replicas}' if m.replicas > 1 else ''}  [dim]{escape(m.why)}[/]"
        )
    for w in draft.warnings:
        out.print(f"[yellow]warning:[/] {escape(w)}")


def register(app: typer.Typer) -> None:
    app.command("init")(init_cmd)
