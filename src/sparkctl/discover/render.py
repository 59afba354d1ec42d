"""A Draft as a commented profile YAML: each discovered value says where it came from."""

from __future__ import annotations

import yaml

from sparkctl.discover.proposal import Draft, NodeDraft
from sparkctl.engines import DEFAULT_ENGINE, get_engine

COMMENT_COL = 36


def _y(value: object) -> str:
    """One YAML flow value (quoted where YAML would misread it, e.g. "12.1")."""
    return (
        yaml.safe_dump(value, default_flow_style=True, width=10_000, sort_keys=False)
        .strip()
        .removesuffix("\n...")
        .strip()
    )


class _Out:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, text: str = "", comment: str = "") -> None:
        if comment:
            text = f"{text:<{COMMENT_COL - 1}} # {comment}" if text.strip() else f"{text}# {comment}"
        self.lines.append(text.rstrip())

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _node(out: _Out, n: NodeDraft) -> None:
    out(f"  - name: {_y(n.name)}")
    out(f"    address: {_y(n.address)}", n.note)
    if n.user:
        out(f"    user: {_y(n.user)}")
    if n.port:
        out(f"    port: {n.port}")
    out(f"    gpus: {n.gpus}")
    if n.gpu:
        out(f"    gpu: {_y(n.gpu)}", "from nvidia-smi (preflight re-checks)")
    if n.hf_cache:
        out(f"    hf_cache: {_y(n.hf_cache)}", "where this node has the model")
    if n.fabric:
        e = n.fabric
        speed = f", {e.speed_mbps // 1000} Gb/s" if e.speed_mbps else ""
        out("    fabric:")
        out(f"      netdevs: {_y([e.netdev])}")
        out(f"      ip: {_y(e.ip)}", f"/{e.prefixlen}, MTU {e.mtu}{speed}")
        if e.hcas:
            out(f"      hcas: {_y(list(e.hcas))}", "ACTIVE RoCE devices bound to it (sysfs)")


def render_profile(d: Draft, *, command: str = "sparkctl init") -> str:
    out = _Out()
    out(f"# Written by `{command}` from what it discovered on the nodes; edit freely.")
    out("# Check it: `sparkctl profile check`, then `sparkctl preflight MODE`. Keys: docs/profile.md.")
    out(f"cluster: {_y(d.cluster)}", "names containers, labels and the lock")
    out()
    out("ssh:")
    out(f"  known_hosts: {_y(d.known_hosts or '~/.ssh/known_hosts')}")
    out("  host_key_policy: strict", "refuse unknown/changed host keys")
    if d.ssh_user:
        out(f"  user: {_y(d.ssh_user)}")
    if d.ssh_key:
        out(f"  key: {_y(d.ssh_key)}")
    out()
    if d.fabric is not None:
        out("fabric:", d.fabric.describe())
        out(f"  mtu: {d.mtu}", "1500 on either side makes NCCL hang at warm-up")
        why = (
            "RoCE devices on every node's fabric netdev" if d.transport == "roce" else "no RoCE device found"
        )
        out(f"  transport: {d.transport}", why)
        out("  dist_init_port: 50051")
        out()
    out("nodes:", "the first is rank 0 of multi-node modes")
    for n in d.nodes:
        _node(out, n)
    out()
    out("image:")
    out(f"  ref: {_y(d.image)}", d.image_note)
    out()
    out("model:")
    out("  target:")
    out(f"    id: {_y(d.model)}")
    out(f"    revision: {_y(d.model_revision.value)}", d.model_revision.note)
    if d.draft:
        out("  draft:", "DFlash draft: enables speculative decoding")
        out(f"    id: {_y(d.draft)}")
        if d.draft_revision:
            out(f"    revision: {_y(d.draft_revision.value)}", d.draft_revision.note)
    out(f"  hf_cache: {_y(d.hf_cache)}", "mounted as HF_HOME")
    out()
    out("engine:")
    if d.engine != DEFAULT_ENGINE:
        out(f"  kind: {d.engine}", "the image's engine (docs/engines.md)")
    images = get_engine(d.engine).images
    version_key = images.version_key if images else None
    if d.engine_version and version_key:
        out("  options:")
        out(f"    {version_key}: {_y(d.engine_version)}", "the engine's release, from the image's label")
    out(
        f"  host: {_y(d.api_host)}",
        "the API listens here only; for your LAN set this node's address or 0.0.0.0",
    )
    out("  api_key: {env: SPARKCTL_API_KEY}", "clients send it as a bearer token; export it before `up`")
    out("  container:")
    if not d.container_gpus:
        out("    gpus: false", "no NVIDIA GPU found on any node")
    if d.rdma_preset:
        out("    preset: rdma", "multi-node modes: /dev/infiniband/*, cap IPC_LOCK, memlock unlimited")
    else:
        out("    preset: none", "no RoCE fabric: no RDMA devices in the containers")
    out("    shm_size: 32g", "/dev/shm of each container's private IPC namespace")
    out("  # secrets:", "for gated models; written into the container as a file, never stored")
    out("  #   HF_TOKEN: {env: HF_TOKEN}", "or {file: PATH} of a 0400 file on every node")
    out("  # args: {}", "model-specific engine flags (see profiles/dual-spark.yaml)")
    out()
    out("modes:")
    for m in d.modes:
        out(f"  {m.name}:", m.why)
        out(f"    nodes: {_y(list(m.nodes))}")
        out(f"    tp: {m.tp}")
        if m.replicas > 1:
            out(f"    replicas: {m.replicas}")
        if m.default:
            out("    default: true")
    return out.text()
