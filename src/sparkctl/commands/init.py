"""`sparkctl init`: discover the nodes and write a working, commented profile (docs/init.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sparkctl.commands._common import console, handle_errors


@handle_errors
def init(
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
    output: Annotated[Path, typer.Option("--output", "-o", help="Profile to write.")] = Path("sparkctl.yaml"),
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
            "--accept-new-host-keys", help="Trust and record unknown SSH host keys (changed ones are refused)."
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
    connect_timeout: Annotated[float, typer.Option(hidden=True)] = 10.0,
    sysfs_root: Annotated[str, typer.Option(hidden=True, help="sysfs root on every node (tests).")] = "/sys",
) -> None:
    """Discover this machine and the peers (netdevs, RoCE, GPUs, Docker, SGLang images, HF caches),
    pick the shared fabric, propose modes, ask for the model and image, and write a profile."""
    from sparkctl.errors import UsageError

    if peer and node:
        raise UsageError("give either --peer (this machine is rank 0) or --node (every node), not both")
    hosts = list(node) if node else ["local", *(peer or [])]
    targets = [_parse_host(h) for h in hosts]
    dupes = sorted({t[0] for t in targets if [x[0] for x in targets].count(t[0]) > 1})
    if dupes:
        raise UsageError(f"node given twice: {', '.join(dupes)}")

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
        )
        return

    try:
        _run_init(
            targets,
            non_interactive=non_interactive,
            output=output,
            force=force,
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
    except typer.Abort:  # a question met the end of stdin (no terminal) or Ctrl-D
        from sparkctl.errors import UsageError

        raise UsageError(
            "init asks questions and got no answer (stdin is not a terminal or was closed)",
            fix="run it in a terminal, or pass --non-interactive --model ORG/NAME --image REF "
            "(and --draft ORG/NAME or none)",
        ) from None


def _parse_host(text: str) -> tuple[str, str | None, int | None]:
    """'[user@]host[:port]' -> (host, user, port); 'local' is this machine."""
    from sparkctl.errors import UsageError

    user, _, rest = text.rpartition("@")
    host, sep, port = rest.partition(":")
    if not host or (sep and not port.isdigit()):
        raise UsageError(f"bad node address '{text}'", fix="use [USER@]HOST[:PORT], e.g. spark@192.168.1.12")
    return host, user or None, int(port) if sep else None


def _connect(host, user, port, *, ssh_user, ssh_key, known_hosts, accept_new, timeout):  # noqa: ANN001, ANN202
    if host == "local":
        from sparkctl.connectors.local import LocalConnector

        return LocalConnector("local")
    from sparkctl.connectors.ssh import SshConnector, resolve_target

    target = resolve_target(
        host, host, user=user or ssh_user, port=port, key=ssh_key, default_user=None, default_port=22,
        default_key=None, known_hosts=known_hosts, accept_new=accept_new, connect_timeout=timeout,
    )  # fmt: skip
    return SshConnector(target).connect()


def _discover(targets, *, ssh_user, ssh_key, known_hosts, accept_new, timeout, sysfs_root, hf_cache, image=None):  # noqa: ANN001, ANN202
    """Connect to and discover every node in parallel; one error naming every node that failed."""
    from sparkctl.connectors.pool import fan_out
    from sparkctl.discover.facts import gather
    from sparkctl.errors import AuthError, ConnectError, SparkctlError

    conns: dict = {}

    def one(i: int):  # noqa: ANN202
        host, user, port = targets[i]
        conns[i] = _connect(host, user, port, ssh_user=ssh_user, ssh_key=ssh_key, known_hosts=known_hosts,
                            accept_new=accept_new, timeout=timeout)  # fmt: skip
        return gather(conns[i], host, sysfs_root=sysfs_root, hf_cache=hf_cache, image=image)

    try:
        done = fan_out(range(len(targets)), one)
    finally:
        for conn in conns.values():
            conn.close()
    failed = [(targets[i][0], exc) for i, exc in done.items() if isinstance(exc, BaseException)]
    if failed:
        for _, exc in failed:
            if not isinstance(exc, SparkctlError):
                raise exc
        host, exc = failed[0]
        more = "".join(f"; {h}: {e.message}" for h, e in failed[1:])  # type: ignore[union-attr]
        kind = ConnectError if all(isinstance(e, ConnectError) for _, e in failed) else SparkctlError
        fix = exc.fix  # type: ignore[union-attr]
        if isinstance(exc, AuthError):
            setup = f"`sparkctl init --ssh-setup --peer {host}` installs a key (password typed once)"
            fix = f"{setup}; {fix}" if fix else setup
        raise kind(f"cannot discover {host}: {exc.message}{more}", fix=fix, node=host)  # type: ignore[union-attr]
    return [done[i] for i in range(len(targets))]


def _ask(prompt: str, flag: str, value: str | None, default: str | None, non_interactive: bool) -> str:
    from sparkctl.errors import UsageError

    if value:
        return value
    if non_interactive:
        hint = f" (discovered: {default})" if default else ""
        raise UsageError(f"--non-interactive needs {flag}{hint}", fix=f"pass {flag} ...")
    return typer.prompt(prompt, default=default) if default else typer.prompt(prompt)


def _run_init(targets, *, non_interactive, output, force, model, draft, image, cluster, hf_cache, fabric,  # noqa: ANN001, PLR0913
              ssh_user, ssh_key, known_hosts, accept_new, timeout, sysfs_root) -> None:  # fmt: skip
    from sparkctl.discover import proposal as prop
    from sparkctl.discover.fabric import NodeNet, pick_fabric
    from sparkctl.discover.render import render_profile
    from sparkctl.errors import UsageError
    from sparkctl.profile import load_profile_text

    out = console()
    with out.status("discovering " + ", ".join(t[0] for t in targets) + " ..."):
        nodes = _discover(targets, ssh_user=ssh_user, ssh_key=ssh_key, known_hosts=known_hosts,
                          accept_new=accept_new, timeout=timeout, sysfs_root=sysfs_root, hf_cache=hf_cache,
                          image=image)
    names = prop.node_names([n.hostname or n.host for n in nodes])
    for n, name in zip(nodes, names, strict=True):
        n.name = name
    fab = None
    if len(nodes) > 1:
        fab = pick_fabric([NodeNet(n.name, n.netdevs, n.rdma, n.ssh_ip) for n in nodes], fabric)
    show_discovery(nodes, fab)

    # The questions: only what cannot be discovered.
    model_text = _ask("Model (HF id[@revision])", "--model ORG/NAME", model, prop.default_model(nodes),
                      non_interactive)  # fmt: skip
    model_id, model_rev = prop.split_ref(model_text)
    d_default = prop.default_draft(nodes, model_id) or "none"
    draft_text = draft or ("none" if non_interactive else typer.prompt("DFlash draft model ('none': no draft)",
                                                                         default=d_default))  # fmt: skip
    draft_id, draft_rev = prop.split_ref(draft_text) if draft_text.lower() != "none" else (None, None)
    image_ref = _ask("Serving image", "--image REF", image, prop.default_image(nodes), non_interactive)
    name = cluster or prop.default_cluster(names)
    if cluster and prop.sanitize(cluster) != cluster:
        raise UsageError(f"--cluster {cluster}: use lowercase letters, digits, '-', '_' or '.' (<= 40)")

    answers = prop.Answers(cluster=name, model=model_id, model_revision=model_rev, draft=draft_id,
                           draft_revision=draft_rev, image=image_ref, hf_cache=hf_cache)  # fmt: skip
    draft_obj = prop.build_draft(
        nodes, names, fab, answers, addresses=[(t[0], t[1], t[2]) for t in targets],
        known_hosts=known_hosts, ssh_key=ssh_key, ssh_user=ssh_user,
    )  # fmt: skip
    text = render_profile(draft_obj)
    load_profile_text(text, str(output))  # what we write must load; a failure here is a bug
    show_proposal(draft_obj)
    _write(output, text, force, non_interactive)


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
        raise UsageError(f"{path} exists; not overwritten (the diff above is what init would change)",
                         fix="rerun with --force to overwrite, or -o OTHER.yaml")  # fmt: skip
    if not non_interactive and not typer.confirm(f"Write {path}?", default=True):
        raise typer.Exit(1)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    out.print(f"[green]wrote {path}[/]  next: `sparkctl preflight -p {path} MODE`")


def show_discovery(nodes, fab) -> None:  # noqa: ANN001 - NodeDiscovery list, FabricOption (lazy imports)
    from rich.markup import escape
    from rich.table import Table

    out = console()
    table = Table(title="discovered")
    for col in ("node", "reached as", "GPUs", "Docker", "RoCE", "SGLang images", "models in HF cache"):
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
        ends = ", ".join(f"{e.node} {e.netdev} {e.ip}" + (f" [{'/'.join(e.hcas)}]" if e.hcas else "")
                         for e in fab.ends)  # fmt: skip
        out.print(f"[bold]fabric[/] {escape(fab.describe())}: {escape(ends)}")


def show_proposal(draft) -> None:  # noqa: ANN001 - sparkctl.discover.Draft
    from rich.markup import escape

    out = console()
    for m in draft.modes:
        star = " [green](default)[/]" if m.default else ""
        out.print(
            f"[bold]mode[/] {escape(m.name)}{star}: {', '.join(m.nodes)} tp={m.tp}  [dim]{escape(m.why)}[/]"
        )
    for w in draft.warnings:
        out.print(f"[yellow]warning:[/] {escape(w)}")


def register(app: typer.Typer) -> None:
    app.command("init")(init)
