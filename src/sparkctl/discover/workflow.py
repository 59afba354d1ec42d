"""The `sparkctl init` workflow: connect, discover every node, pick the fabric, ask only what
cannot be discovered, and produce a profile text that loads. The CLI supplies the `InitUi`
(prompts, tables) and decides about writing; nothing here imports typer or rich."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from sparkctl.errors import AuthError, ConnectError, SparkctlError, UsageError

if TYPE_CHECKING:
    from sparkctl.connectors.base import Connector
    from sparkctl.discover.fabric import FabricOption
    from sparkctl.discover.facts import NodeDiscovery
    from sparkctl.discover.proposal import Answers, Draft
    from sparkctl.fanout import Outcome

Target = tuple[str, str | None, int | None]  # host, user, port ("local": this machine)


@dataclass(frozen=True)
class InitRequest:
    """What the user asked for (flags); None = ask, or take what was discovered."""

    targets: list[Target]
    non_interactive: bool = False
    model: str | None = None
    draft: str | None = None
    image: str | None = None
    cluster: str | None = None
    hf_cache: str | None = None
    fabric: str | None = None
    ssh_user: str | None = None
    ssh_key: str | None = None
    known_hosts: str = "~/.ssh/known_hosts"
    accept_new: bool = False
    timeout: float = 10.0
    sysfs_root: str = "/sys"


class InitUi(Protocol):
    def status(self, text: str) -> contextlib.AbstractContextManager[object]: ...
    def ask(self, prompt: str, default: str | None) -> str: ...
    def show_discovery(self, nodes: list[NodeDiscovery], fab: FabricOption | None) -> None: ...
    def show_proposal(self, draft: Draft) -> None: ...


def parse_host(text: str) -> Target:
    """'[user@]host[:port]' -> (host, user, port); 'local' is this machine."""
    user, _, rest = text.rpartition("@")
    host, sep, port = rest.partition(":")
    if not host or (sep and not port.isdigit()):
        raise UsageError(f"bad node address '{text}'", fix="use [USER@]HOST[:PORT], e.g. spark@192.168.1.12")
    return host, user or None, int(port) if sep else None


def parse_targets(node: list[str] | None, peer: list[str] | None) -> list[Target]:
    if peer and node:
        raise UsageError("give either --peer (this machine is rank 0) or --node (every node), not both")
    targets = [parse_host(h) for h in (list(node) if node else ["local", *(peer or [])])]
    hosts = [t[0] for t in targets]
    dupes = sorted({h for h in hosts if hosts.count(h) > 1})
    if dupes:
        raise UsageError(f"node given twice: {', '.join(dupes)}")
    return targets


def _connect(req: InitRequest, target: Target) -> Connector:
    from sparkctl.connectors.pool import connector_to

    host, user, port = target
    conn = connector_to(
        host,
        host,
        local=host == "local",
        user=user or req.ssh_user,
        port=port,
        key=req.ssh_key,
        default_user=None,
        default_port=22,
        default_key=None,
        known_hosts=req.known_hosts,
        accept_new=req.accept_new,
        connect_timeout=req.timeout,
    )
    connect = getattr(conn, "connect", None)
    return connect() if connect is not None else conn


def discover_nodes(req: InitRequest) -> list[NodeDiscovery]:
    """Connect to and discover every node in parallel; one error naming every node that failed."""
    from sparkctl.discover.facts import gather
    from sparkctl.fanout import fan_out

    conns: dict[int, Connector] = {}

    def one(i: int) -> NodeDiscovery:
        conns[i] = _connect(req, req.targets[i])
        return gather(
            conns[i], req.targets[i][0], sysfs_root=req.sysfs_root, hf_cache=req.hf_cache, image=req.image
        )

    hosts = {i: t[0] for i, t in enumerate(req.targets)}
    try:
        done = fan_out(range(len(req.targets)), one, where=lambda i: (hosts[i], None))
    finally:
        for conn in conns.values():
            conn.close()
    if done.errors:
        raise _discovery_error(done.failed)
    return list(done.values_or_raise().values())


def _discovery_error(failed: list[Outcome]) -> SparkctlError:
    for o in failed:
        if not isinstance(o.error, SparkctlError):
            raise o.error  # a bug: keep its traceback
    first, rest = failed[0], failed[1:]
    exc, host = first.error, first.node
    more = "".join(f"; {o.node}: {o.error.message}" for o in rest)
    kind = ConnectError if all(isinstance(o.error, ConnectError) for o in failed) else SparkctlError
    fix = exc.fix
    if isinstance(exc, AuthError):
        setup = f"`sparkctl init --ssh-setup --peer {host}` installs a key (password typed once)"
        fix = f"{setup}; {fix}" if fix else setup
    return kind(f"cannot discover {host}: {exc.message}{more}", fix=fix, node=host)


def _ask(ui: InitUi, req: InitRequest, prompt: str, flag: str, value: str | None, default: str | None) -> str:
    if value:
        return value
    if req.non_interactive:
        hint = f" (discovered: {default})" if default else ""
        raise UsageError(f"--non-interactive needs {flag}{hint}", fix=f"pass {flag} ...")
    return ui.ask(prompt, default)


def _answers(req: InitRequest, ui: InitUi, nodes: list[NodeDiscovery], names: list[str]) -> Answers:
    """The questions: only what cannot be discovered."""
    from sparkctl.discover import defaults
    from sparkctl.discover import proposal as prop

    model_text = _ask(
        ui, req, "Model (HF id[@revision])", "--model ORG/NAME", req.model, defaults.default_model(nodes)
    )
    model_id, model_rev = defaults.split_ref(model_text)
    d_default = defaults.default_draft(nodes, model_id) or "none"
    draft_prompt = "DFlash draft model ('none': no draft)"
    draft_text = req.draft or ("none" if req.non_interactive else ui.ask(draft_prompt, d_default))
    draft_id, draft_rev = defaults.split_ref(draft_text) if draft_text.lower() != "none" else (None, None)
    image_ref = _ask(ui, req, "Serving image", "--image REF", req.image, defaults.default_image(nodes))
    name = req.cluster or prop.default_cluster(names)
    if req.cluster and prop.sanitize(req.cluster) != req.cluster:
        raise UsageError(f"--cluster {req.cluster}: use lowercase letters, digits, '-', '_' or '.' (<= 40)")
    return prop.Answers(
        cluster=name,
        model=model_id,
        model_revision=model_rev,
        draft=draft_id,
        draft_revision=draft_rev,
        image=image_ref,
        hf_cache=req.hf_cache,
    )


def run_init(req: InitRequest, ui: InitUi, output: Path) -> str:
    """Discover, ask, propose: the profile text (already checked to load)."""
    from sparkctl.discover import proposal as prop
    from sparkctl.discover.fabric import NodeNet, pick_fabric
    from sparkctl.discover.render import render_profile
    from sparkctl.profile import load_profile_text

    with ui.status("discovering " + ", ".join(t[0] for t in req.targets) + " ..."):
        nodes = discover_nodes(req)
    names = prop.node_names([n.hostname or n.host for n in nodes])
    for n, name in zip(nodes, names, strict=True):
        n.name = name
    fab = None
    if len(nodes) > 1:
        fab = pick_fabric([NodeNet(n.name, n.netdevs, n.rdma, n.ssh_ip) for n in nodes], req.fabric)
    ui.show_discovery(nodes, fab)
    answers = _answers(req, ui, nodes, names)
    draft_obj = prop.build_draft(
        nodes,
        names,
        fab,
        answers,
        addresses=list(req.targets),
        known_hosts=req.known_hosts,
        ssh_key=req.ssh_key,
        ssh_user=req.ssh_user,
    )
    text = render_profile(draft_obj)
    load_profile_text(text, str(output))  # what we write must load; a failure here is a bug
    ui.show_proposal(draft_obj)
    return text
